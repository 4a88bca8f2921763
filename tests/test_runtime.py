"""Strategy and mixed-precision choices of the training program."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from training import runtime


@pytest.mark.parametrize(
    "gpus, capability, mirrored, policy",
    [
        (0, None, False, "float32"),
        (1, (9, 0), False, "mixed_bfloat16"),
        (2, (7, 5), True, "float32"),
    ],
)
def test_auto_strategy_and_precision(monkeypatch, gpus, capability, mirrored, policy):
    """auto: MirroredStrategy with several GPUs, bf16 when every GPU is Ampere or newer; the GPUs
    are stand-ins, so the choice is checked whatever this machine has."""
    for name in runtime.TPU_HINTS:
        monkeypatch.delenv(name, raising=False)
    listed = [tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(gpus)]
    real = tf.config.list_physical_devices
    monkeypatch.setattr(
        tf.config,
        "list_physical_devices",
        lambda kind=None: listed if kind == "GPU" else real(kind),
    )
    monkeypatch.setattr(
        tf.config.experimental,
        "get_device_details",
        lambda device: {"compute_capability": capability},
    )
    strategy = runtime.create_strategy("auto")
    if mirrored:
        assert isinstance(strategy, tf.distribute.MirroredStrategy)
    else:
        assert strategy is tf.distribute.get_strategy()
    assert runtime.set_mixed_precision("auto", strategy) == policy
    assert runtime.set_mixed_precision("bf16", strategy) == "mixed_bfloat16"


def test_fp16_trains_with_loss_scaling():
    runtime.set_mixed_precision("fp16", tf.distribute.get_strategy())
    config = kt.TransformerConfig.preset("tiny", vocab_size=30, num_layers=1)
    model = kt.build_transformer(config)
    model.compile(optimizer=kt.create_optimizer(config), loss=kt.LabelSmoothedCrossEntropy())
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert model.embedding.compute_dtype == "float16"
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, 30, (8, 10)).astype("int32")
    before = [np.array(w) for w in model.trainable_weights]
    losses = [
        float(model.train_on_batch({"source": tokens, "target": tokens}, tokens)) for _ in range(3)
    ]
    assert all(np.isfinite(losses))
    assert all(w.dtype == "float32" for w in model.trainable_weights)  # float32 master weights
    assert all(not np.array_equal(b, np.array(w)) for b, w in zip(before, model.trainable_weights))


@pytest.mark.parametrize(
    "tf_config, chief",
    [
        (None, True),
        ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}, True),
        ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}, False),
        (
            {
                "cluster": {"chief": ["c:1"], "worker": ["a:1"]},
                "task": {"type": "worker", "index": 0},
            },
            False,
        ),
        (
            {
                "cluster": {"chief": ["c:1"], "worker": ["a:1"]},
                "task": {"type": "chief", "index": 0},
            },
            True,
        ),
    ],
)
def test_only_the_chief_writes(monkeypatch, tf_config, chief):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    assert runtime.is_chief() is chief
