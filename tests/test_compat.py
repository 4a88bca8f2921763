"""keras_transformer/compat.py: each workaround is still needed (the behaviour it works around is
still there; when a release changes it, the test fails and says what can be removed) and works."""

import inspect
import pathlib
import re

import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from conftest import TWO_CPUS, run_script

from keras_transformer import compat

SYMBOLIC_BUILD_SCRIPT = (
    TWO_CPUS
    + """
import keras, numpy as np

class Recorder(keras.Model):
    def _symbolic_build(self, iterator=None, data_batch=None):
        self.seen = keras.tree.map_structure(lambda t: str(t.dtype), data_batch)
        return super()._symbolic_build(iterator=iterator, data_batch=data_batch)

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    ids = keras.Input((None,), dtype="int32", name="ids")
    logits = keras.layers.Dense(5)(keras.layers.Embedding(10, 4)(ids))
    model = Recorder(ids, logits)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="sgd", loss=loss)
data = np.arange(24, dtype="int32").reshape(8, 3) % 10
batches = tf.data.Dataset.from_tensor_slices((data, data % 5)).batch(4)
model.fit(batches, epochs=1, verbose=0)
print("RESULT " + json.dumps(model.seen))
"""
)


def test_keras_still_builds_the_model_from_a_mean_reduced_batch_under_a_strategy():
    """What `TensorFlowTrainerFixes._maybe_symbolic_build` works around: Keras's TensorFlow trainer
    builds from a batch averaged across replicas, so int32 ids arrive as floats."""
    seen = run_script(SYMBOLIC_BUILD_SCRIPT)
    assert seen[0] != "int32", (
        "Keras now builds a model under a strategy from the batch's own int32 ids: "
        "compat.TensorFlowTrainerFixes._maybe_symbolic_build may no longer be needed"
    )


def test_scalar_logs_still_fail_the_multi_worker_mean_reduction():
    """What `TensorFlowTrainerFixes._logs_for_reduction` works around: under several workers Keras
    reduces each log with strategy.reduce("MEAN", value, axis=0), which fails on a scalar."""
    from keras.src.backend.tensorflow import trainer

    assert 'strategy.reduce("MEAN", v, axis=0)' in inspect.getsource(trainer.reduce_per_replica), (
        "Keras no longer reduces multi-worker logs along axis 0: "
        "compat.TensorFlowTrainerFixes.train_step "
        "and test_step may no longer be needed"
    )
    strategy = tf.distribute.get_strategy()
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
        strategy.reduce("MEAN", tf.constant(1.5), axis=0)
    assert (
        float(strategy.reduce("MEAN", tf.constant([1.5]), axis=0)) == 1.5
    )  # the workaround's shape [1]


def test_multi_worker_mode_is_off_without_several_workers():
    # (with two workers it is on: tests/test_train_program.py trains with two worker processes)
    assert not compat.in_multi_worker_mode(tf.distribute.get_strategy())
    assert not compat.in_multi_worker_mode(tf.distribute.OneDeviceStrategy("/cpu:0"))


def test_tensorflow_text_still_loses_its_sentencepiece_model_after_set_seed(tokenizer):
    """What `compat.sentencepiece_tokenizer` works around."""
    plain = tf_text.SentencepieceTokenizer(model=tokenizer.model_proto, out_type=tf.int32)
    named = compat.sentencepiece_tokenizer(tokenizer.model_proto, "named")
    sentence = tf.constant(["Das Haus ist groß."])
    expected = plain.tokenize(sentence).to_list()
    tf.random.set_seed(1)
    assert named.tokenize(sentence).to_list() == expected
    try:
        plain.tokenize(sentence)
    except tf.errors.NotFoundError:
        return
    pytest.fail(
        "tensorflow-text's SentencepieceTokenizer now survives tf.random.set_seed: "
        "compat.sentencepiece_tokenizer may no longer be needed"
    )


def test_the_library_touches_private_api_only_in_compat():
    r"""The issue's check, `grep -rn "keras.src\|\._[a-z_]*(" keras_transformer/`, less the
    dunder calls it also matches (super().__init__(...) is Python's protocol, not private API)
    and a NamedTuple's `_replace`, `_asdict` and `_make` (public: the underscore only keeps
    them apart from the fields' names)."""
    private = re.compile(r"keras\.src|\._(?!_|(?:replace|asdict|make)\()[a-z_]*\(")
    assert private.search("x._private(") and private.search("x._replace_all(")
    assert not private.search("state._replace(") and not private.search("super().__init__(")
    library = pathlib.Path(compat.__file__).parent
    found = [
        f"{path.relative_to(library)}:{number}: {line.strip()}"
        for path in sorted(library.rglob("*.py"))
        if path.name != "compat.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert not found, "\n".join(found)
