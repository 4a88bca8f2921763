"""Trains, saves or loads the tiny model for tests/test_backends.py under the Keras backend
named by KERAS_BACKEND and writes the logits of fixed inputs: run as a child process, or in
pytest's process (`main`) for the TensorFlow side.

    python tests/backend_child.py train MODEL.keras VOCAB_SIZE EPOCHS [--block-tensorflow]
    python tests/backend_child.py load MODEL.keras [--block-tensorflow]

Writes MODEL.keras.<command>.<backend>.npz: the inputs, the logits, the weights (weight_0, ...),
(train) the epoch losses, whether tensorflow was imported, and with --block-tensorflow (every
import of tensorflow or tensorflow_text fails, as on a machine without them) the errors of the
TensorFlow-only names. `train` saves the model as initialised too, as MODEL.initial.keras with
its own MODEL.initial.keras.train.<backend>.npz (no losses).
"""

import os
import pathlib
import sys

import blocking


def fixed_inputs(vocab_size):
    """A copy task over 12 token ids with padding on both sides: target = bos + source."""
    import numpy as np

    rng = np.random.default_rng(7)
    source = rng.integers(4, min(vocab_size, 16), (512, 8)).astype("int32")
    source[::3, 5:] = 0
    target = np.concatenate([np.full((len(source), 1), 2, "int32"), source[:, :-1]], axis=1)
    labels = source.copy()
    return {"source": source, "target": target}, labels


def initial_path(path):
    """Where `train` saves the model of `path` as initialised."""
    return pathlib.Path(path).with_suffix(".initial.keras")


def main(command, path, *rest):
    if "--block-tensorflow" in rest:
        blocking.install()
    import keras

    import keras_transformer as kt

    if command == "train":
        keras.utils.set_random_seed(0)
        config = kt.TransformerConfig.preset(
            "tiny", vocab_size=int(rest[0]), dropout=0.0, warmup_steps=100
        )
        model = kt.build_transformer(config)
        model.compile(optimizer=kt.create_optimizer(config), loss=kt.LabelSmoothedCrossEntropy())
        inputs, labels = fixed_inputs(config.vocab_size)
        model.save(initial_path(path))  # compiled: the schedule and the loss travel too
        write(initial_path(path), command, model, inputs)
        history = model.fit(
            inputs, labels, batch_size=32, epochs=int(rest[1]), shuffle=False, verbose=0
        )
        model.save(path)
        try:  # gradient accumulation is TensorFlow's training step
            model.compile(optimizer="adam", loss=kt.LabelSmoothedCrossEntropy(), accumulate_steps=2)
            accumulation = "accepted"
        except ValueError as error:
            accumulation = str(error)
        losses = history.history.get("loss", [])  # none at EPOCHS 0
    else:
        model = keras.saving.load_model(path)
        inputs, _ = fixed_inputs(model.config.vocab_size)
        losses, accumulation = [], ""
    refusals = []
    if "--block-tensorflow" in rest:
        for module, name in [(kt, name) for name in sorted(kt.TENSORFLOW_ONLY)] + [
            (kt.data, "make_batches")  # text pipelines need TensorFlow; binarized data not
        ]:
            try:
                getattr(module, name)
            except ImportError as error:
                refusals.append(str(error))
    write(path, command, model, inputs, losses, refusals, accumulation)


def write(path, command, model, inputs, losses=(), refusals=(), accumulation=""):
    """PATH.COMMAND.BACKEND.npz: the model's inputs, logits and weights, and what else `main`
    found."""
    import keras
    import numpy as np

    np.savez(
        f"{path}.{command}.{keras.backend.backend()}.npz",
        **inputs,
        logits=keras.ops.convert_to_numpy(model(inputs)),
        losses=np.array(losses),
        tensorflow_imported=any(name.split(".")[0] == "tensorflow" for name in sys.modules),
        refusals=np.array(refusals, dtype=str),
        accumulation=accumulation,
        **{f"weight_{i}": keras.ops.convert_to_numpy(w) for i, w in enumerate(model.weights)},
    )


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main(*sys.argv[1:])
