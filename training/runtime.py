"""Where training runs: the tf.distribute strategy and the mixed-precision policy.

One code path for one CPU, several GPUs, a TPU and several machines: the strategy's scope
builds the model, and `model.fit` splits each batch across its replicas.
"""

import json
import os
import pathlib

import keras
import tensorflow as tf

from keras_transformer.compat import in_multi_worker_mode

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")
PRECISIONS = ("auto", "off", "bf16", "fp16")
POLICIES = {"off": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
TPU_HINTS = ("TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE")


def tpu_present():
    """True when the environment names a TPU (Cloud TPU, Colab) or a local TPU device exists.
    Checked before resolving one, which otherwise queries the GCE metadata server."""
    return any(os.environ.get(name) for name in TPU_HINTS) or pathlib.Path("/dev/accel0").exists()


def connect_tpu(tpu=None):
    """TPUStrategy for the TPU named `tpu` (a name, grpc:// address or "local")."""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        raise ValueError(f"--strategy tpu: no TPU could be resolved ({error})") from None
    return tf.distribute.TPUStrategy(resolver)


def split_cpu(count):
    """Splits the CPU into `count` logical devices (before TensorFlow initializes its devices),
    so that MirroredStrategy can be tried on one machine; returns their names."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * count
        )
    except RuntimeError as error:
        raise ValueError(f"cannot split the CPU into {count} devices: {error}") from None
    return [f"/cpu:{i}" for i in range(count)]


def create_strategy(name, tpu=None, cpu_devices=1):
    """The strategy `name` picks (one of STRATEGIES).

    auto: TPUStrategy when a TPU resolves, MirroredStrategy with more than one GPU (or with
    `cpu_devices` > 1 logical CPUs), the default strategy otherwise. multi_worker:
    MultiWorkerMirroredStrategy from the TF_CONFIG variable.
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    if keras.backend.backend() != "tensorflow":
        if name not in ("auto", "default") or cpu_devices > 1:
            raise ValueError(
                f"--strategy {name} (and --cpu-devices) distribute with tf.distribute, which "
                f"needs KERAS_BACKEND=tensorflow; under {keras.backend.backend()} the run uses "
                "one device"
            )
        return tf.distribute.get_strategy()  # its scope changes nothing under other backends
    devices = split_cpu(cpu_devices) if cpu_devices > 1 else None
    if name == "auto":
        if tpu or tpu_present():
            return connect_tpu(tpu)
        several = devices or len(tf.config.list_physical_devices("GPU")) > 1
        name = "mirrored" if several else "default"
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(
            devices if devices and not tf.config.list_physical_devices("GPU") else None
        )
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError(
                "--strategy multi_worker reads the cluster from the TF_CONFIG environment "
                "variable, "
                "e.g. "
                '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                '"task": {"type": "worker", "index": 0}}'
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    return connect_tpu(tpu)


def is_tpu(strategy):
    return isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))


def is_chief():
    """True for the process that writes checkpoints, summaries and the export: the only one,
    or in a TF_CONFIG cluster the chief (or worker 0 when there is no chief)."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task", {})
    if not task:
        return True
    if "chief" in config.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0


def workers_agree(strategy, ok):
    """Whether every worker passes ok=True: under several workers a collective sum that waits
    for all of them (a barrier; MultiWorkerMirroredStrategy's health check ends it when a worker
    dies); `ok` itself otherwise."""
    if not in_multi_worker_mode(strategy):
        return ok
    failures = strategy.experimental_distribute_values_from_function(
        lambda _: tf.constant(0.0 if ok else 1.0)
    )
    return float(strategy.reduce("SUM", failures, axis=None)) == 0.0


def bf16_capable_gpus():
    """True when there are GPUs and all of them are Ampere (compute capability 8.0) or newer."""
    gpus = tf.config.list_physical_devices("GPU")
    capabilities = [
        tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))
        for gpu in gpus
    ]
    return bool(gpus) and all(tuple(c) >= (8, 0) for c in capabilities)


def set_mixed_precision(name, strategy):
    """Sets the global Keras dtype policy and returns its name.

    auto: bf16 on a TPU and on Ampere-or-newer GPUs, float32 otherwise. fp16 ("mixed_float16")
    trains with dynamic loss scaling: `model.compile` wraps the optimizer in a
    LossScaleOptimizer under that policy.
    """
    if name not in PRECISIONS:
        raise ValueError(f"unknown mixed precision {name!r}; choose one of {', '.join(PRECISIONS)}")
    if name == "auto":
        name = "bf16" if is_tpu(strategy) or bf16_capable_gpus() else "off"
    keras.config.set_dtype_policy(POLICIES[name])
    return POLICIES[name]
