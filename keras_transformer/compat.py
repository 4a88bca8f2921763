"""Workarounds for behaviour of Keras 3.15 and tensorflow-text 2.21: the one module of the
library that touches their private API.

Each workaround has a test in tests/test_compat.py that checks the behaviour it works around
still exists, and fails, saying what to remove, once a release changes it.

- `TRAINER_FIXES`, base classes of `Transformer` under the TensorFlow backend (none under JAX or
  PyTorch, whose trainers have neither problem):
  1. Under a tf.distribute strategy, Keras's TensorFlow trainer builds the compiled loss and
     metrics from a batch it takes from the dataset and MEAN-reduces across replicas: that
     turns the token ids into floats, fails when the replicas' shares differ in size, and fails
     for dict inputs under MultiWorkerMirroredStrategy. The model is built already and its
     input signature is fixed, so it is built from symbolic int32 ids instead.
  2. Under MultiWorkerMirroredStrategy with several workers the trainer reduces the logs of a
     step with `strategy.reduce("MEAN", value, axis=0)`, which fails on scalars
     (tensorflow/tensorflow#72388): the logs are given shape [1].
- `sentencepiece_tokenizer`: tensorflow-text's SentencepieceTokenizer keeps its model in a
  resource private to its kernel, which TensorFlow destroys whenever it clears the eager kernel
  cache (`tf.random.set_seed` and `keras.utils.set_random_seed` do): every later call fails with
  "Resource ... does not exist". A shared name, taken from the model's hash, keeps it alive.
"""

import functools
import hashlib

import keras


def in_multi_worker_mode(strategy):
    """True under a MultiWorkerMirroredStrategy whose cluster has more than one worker."""
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    cluster = strategy.cluster_resolver.cluster_spec()
    return sum(cluster.num_tasks(job) for job in ("chief", "worker") if job in cluster.jobs) > 1


class TensorFlowTrainerFixes:
    """Overrides of Keras's TensorFlow trainer for a model whose inputs are
    {"source": int32 [B, S], "target": int32 [B, T]} and whose labels are int32 [B, T]."""

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = getattr(self, "_distribute_strategy", None)
        if iterator is None or strategy is None:
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
        ids = keras.KerasTensor((None, None), "int32")
        with strategy.scope():
            self._symbolic_build(data_batch=({"source": ids, "target": ids}, ids))

    def train_step(self, data):
        return self._logs_for_reduction(super().train_step(data))

    def test_step(self, data):
        return self._logs_for_reduction(super().test_step(data))

    def _logs_for_reduction(self, logs):
        if not in_multi_worker_mode(self.distribute_strategy):
            return logs
        return keras.tree.map_structure(lambda value: keras.ops.reshape(value, (1,)), logs)


TRAINER_FIXES = (TensorFlowTrainerFixes,) if keras.backend.backend() == "tensorflow" else ()


def sentencepiece_tokenizer(model_proto, name, **sampling):
    """tensorflow-text's SentencepieceTokenizer of `model_proto`, int32 ids, whose model
    resource survives a cleared kernel cache (see the module's docstring); `sampling`:
    its nbest_size and alpha."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    tokenizer = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.int32, **sampling)
    tokenizer._model_resource = _named_sentencepiece_resource()(model_proto, name)
    return tokenizer


@functools.cache
def _named_sentencepiece_resource():
    """tensorflow-text's sentencepiece model resource, under a shared name."""
    from tensorflow_text.python.ops import sentencepiece_tokenizer as tf_text_sentencepiece

    class NamedSentencepieceResource(tf_text_sentencepiece._SentencepieceModelResource):
        def _create_resource(self):
            shared_name = (
                "keras_transformer_sentencepiece_" + hashlib.sha256(self._model).hexdigest()[:24]
            )
            return tf_text_sentencepiece.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model, shared_name=shared_name
            )

    return NamedSentencepieceResource
