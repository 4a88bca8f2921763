"""Strategy and mixed-precision choices of the training program."""

import json

import keras
import pytest
import tensorflow as tf

import keras_transformer as kt
from training import runtime


def test_auto_strategy_and_precision_on_a_cpu(monkeypatch):
    for name in runtime.TPU_HINTS:
        monkeypatch.delenv(name, raising=False)
    strategy = runtime.create_strategy("auto")
    assert strategy is tf.distribute.get_strategy()  # no TPU, no GPU here: the default strategy
    assert runtime.set_mixed_precision("auto", strategy) == "float32"
    assert runtime.set_mixed_precision("bf16", strategy) == "mixed_bfloat16"


def test_fp16_trains_with_loss_scaling():
    runtime.set_mixed_precision("fp16", tf.distribute.get_strategy())
    config = kt.TransformerConfig.preset("tiny", vocab_size=30, num_layers=1)
    model = kt.build_transformer(config)
    model.compile(optimizer=kt.create_optimizer(config), loss=kt.LabelSmoothedCrossEntropy())
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert model.embedding.compute_dtype == "float16"


@pytest.mark.parametrize(
    "tf_config, chief",
    [
        (None, True),
        ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}, True),
        ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}, False),
        ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}, False),
        ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}, True),
    ],
)
def test_only_the_chief_writes(monkeypatch, tf_config, chief):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    assert runtime.is_chief() is chief
