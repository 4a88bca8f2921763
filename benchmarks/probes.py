"""What the benchmark measures in fresh processes: `python -m benchmarks.probes KIND ARGS...`
prints one JSON line. A fresh process starts with nothing allocated and nothing compiled.

    peak-memory CONFIG_JSON BATCH LENGTH training|decoding POLICY
        [peak KiB before, peak KiB after 3 training steps or 3 beam searches,
         GPU:0 peak KiB or null]
    saved-model DIRECTORY REPEATS INTRA_OP_THREADS [SENTENCES_FILE]
        {"1": [seconds per call at batch 1], "32": [...]} of the SavedModel's `translate`,
        loaded with tensorflow and tensorflow_text only (REPEATS calls at batch 1, a quarter as
        many at batch 32), TensorFlow's threads within an op set to INTRA_OP_THREADS (0: its
        default, one per core; TensorFlow Serving's --tensorflow_intra_op_parallelism), on the
        file's first sentence and first 32 (default: PROBE_SENTENCE)
    training-step CONFIG_JSON BATCH LENGTH REPEATS
        [seconds of each training step after 2 warm-up steps] under the Keras backend of
        KERAS_BACKEND (compiled: XLA under JAX, a tf.function without XLA under TensorFlow)
"""

import json
import re
import sys
import time

PROBE_SENTENCE = "Das ist ein kleiner Test, nicht mehr."  # what the SavedModel translates


def peak_kib():
    """This process's peak resident memory; VmHWM starts afresh at exec (ru_maxrss would
    include the parent's pages)."""
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\s+(\d+) kB", status.read()).group(1))


def training_batch(config, batch, length):
    """Random (inputs, labels) of one training step: `batch` pairs of `length` tokens a side."""
    import numpy as np

    rng = np.random.default_rng(0)
    source = rng.integers(4, config.vocab_size, (batch, length)).astype("int32")
    target = rng.integers(4, config.vocab_size, (batch, length + 1)).astype("int32")
    return {"source": source, "target": target[:, :-1]}, target[:, 1:]


def training_step(config_json, batch, length, repeats):
    import keras

    import keras_transformer as kt

    config = kt.TransformerConfig.from_dict(json.loads(config_json))
    inputs, labels = training_batch(config, int(batch), int(length))
    model = kt.build_transformer(config)
    model.compile(
        optimizer=kt.create_optimizer(config),
        loss=kt.LabelSmoothedCrossEntropy(),
        jit_compile=keras.backend.backend() == "jax",
    )
    times = []
    for step in range(2 + int(repeats)):
        start = time.perf_counter()
        model.train_on_batch(inputs, labels)
        if step >= 2:
            times.append(time.perf_counter() - start)
    return times


def peak_memory(config_json, batch, length, what, policy):
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt

    config = kt.TransformerConfig.from_dict(json.loads(config_json))
    batch, length = int(batch), int(length)
    keras.config.set_dtype_policy(policy)
    model = kt.build_transformer(config)
    source = (
        np.random.default_rng(0).integers(4, config.vocab_size, (batch, length)).astype("int32")
    )
    before = peak_kib()
    if what == "training":
        model.compile(
            optimizer=kt.create_optimizer(config),
            loss=kt.LabelSmoothedCrossEntropy(),
            jit_compile=False,
        )
        for _ in range(3):
            model.train_on_batch({"source": source, "target": source}, source)
    else:
        for _ in range(3):
            kt.beam_search(model, source, beam_size=4, max_length=64)
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    return [
        before,
        peak_kib(),
        tf.config.experimental.get_memory_info("GPU:0")["peak"] // 1024 if on_gpu else None,
    ]


def saved_model(directory, repeats, intra_op_threads, sentences_file=None):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    tf.config.threading.set_intra_op_parallelism_threads(int(intra_op_threads))
    translate = tf.saved_model.load(directory).signatures["serving_default"]
    sentences = [PROBE_SENTENCE] * 32
    if sentences_file:
        with open(sentences_file, encoding="utf-8") as lines:
            sentences = lines.read().splitlines()[:32]
    answers = {}
    for batch in (1, 32):
        batch_sentences = tf.constant(sentences[:batch])
        for _ in range(2):
            translate(sentences=batch_sentences)
        times = []
        for _ in range(int(repeats) if batch == 1 else max(1, int(repeats) // 4)):
            start = time.perf_counter()
            translate(sentences=batch_sentences)["translation"].numpy()
            times.append(time.perf_counter() - start)
        answers[batch] = times
    return answers


PROBES = {"peak-memory": peak_memory, "saved-model": saved_model, "training-step": training_step}

if __name__ == "__main__":
    print(json.dumps(PROBES[sys.argv[1]](*sys.argv[2:])))
