"""Where training runs: the devices, how each batch is split across them, and the
mixed-precision policy.

Under TensorFlow a tf.distribute strategy: one code path for one CPU, several GPUs, a TPU and
several machines; the strategy's scope builds the model, and `model.fit` splits each batch across
its replicas. Under JAX, Keras's own distribution API (`Devices`): every local device with
`keras.distribution.DataParallel`, and several machines through `keras.distribution.initialize`
(the KERAS_DISTRIBUTION_* variables). Under several workers (processes) of either, they meet at
barriers (`workers_agree`), and a collective whose peer is gone ends the run with one error
naming that worker (`naming_lost_workers`). TensorFlow is imported only under its backend.
"""

import atexit
import contextlib
import json
import os
import pathlib
import re
import sys
import textwrap

import keras

from keras_transformer.compat import in_multi_worker_mode as several_workers

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")
# Keras's distribution API reads these (keras.distribution.initialize): the coordinator's
# address, the number of processes and this one's index.
KERAS_DISTRIBUTION_VARIABLES = (
    "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "KERAS_DISTRIBUTION_NUM_PROCESSES",
    "KERAS_DISTRIBUTION_PROCESS_ID",
)
PRECISIONS = ("auto", "off", "bf16", "fp16")
POLICIES = {"off": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
TPU_HINTS = ("TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE")


def tpu_present():
    """True when the environment names a TPU (Cloud TPU, Colab) or a local TPU device exists.
    Checked before resolving one, which otherwise queries the GCE metadata server."""
    return any(os.environ.get(name) for name in TPU_HINTS) or pathlib.Path("/dev/accel0").exists()


def connect_tpu(tpu=None):
    """TPUStrategy for the TPU named `tpu` (a name, grpc:// address or "local")."""
    import tensorflow as tf

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
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * count
        )
    except RuntimeError as error:
        raise ValueError(f"cannot split the CPU into {count} devices: {error}") from None
    return [f"/cpu:{i}" for i in range(count)]


class Devices:
    """The devices a run under JAX (or PyTorch) trains on, named as tf.distribute names a
    strategy's, for fitting (`training.fit`): each batch is split across `num_replicas_in_sync`
    devices (`keras.distribution.DataParallel` when more than one), of which this process feeds
    the rows `part` = (its index, the processes); `scope()` changes nothing."""

    def __init__(self, devices, part=(0, 1)):
        self.devices, self.part = list(devices), part
        self.num_replicas_in_sync = len(self.devices)

    def scope(self):
        return contextlib.nullcontext()

    def __str__(self):
        processes = f" in {self.part[1]} processes" if self.part[1] > 1 else ""
        if self.num_replicas_in_sync == 1:
            return f"one device ({self.devices[0]})"
        return f"DataParallel over {self.num_replicas_in_sync} devices{processes}"


def create_strategy(name, tpu=None, cpu_devices=1):
    """The strategy `name` picks (one of STRATEGIES).

    auto: TPUStrategy when a TPU resolves, MirroredStrategy with more than one GPU (or with
    `cpu_devices` > 1 logical CPUs), the default strategy otherwise. multi_worker:
    MultiWorkerMirroredStrategy from the TF_CONFIG variable. Under other backends than
    TensorFlow: `keras_devices`.
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    if keras.backend.backend() != "tensorflow":
        if name not in ("auto", "default"):
            raise ValueError(
                f"--strategy {name} is a tf.distribute strategy, which needs "
                f"KERAS_BACKEND=tensorflow; under {keras.backend.backend()} give --strategy auto "
                "(every device, keras.distribution.DataParallel) or default (one device)"
            )
        if cpu_devices > 1:
            raise ValueError(
                f"--cpu-devices splits the CPU for tf.distribute; under {keras.backend.backend()} "
                "set XLA_FLAGS=--xla_force_host_platform_device_count=N before the run instead"
            )
        return keras_devices(name)
    import tensorflow as tf

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


def keras_devices(name):
    """`Devices` for JAX (and PyTorch): under JAX with `name` auto, every device of every
    process (`keras.distribution.initialize` first when the KERAS_DISTRIBUTION_* variables name
    several), shared by `keras.distribution.DataParallel` when there is more than one; one
    device otherwise (PyTorch: the one Keras picks)."""
    if keras.backend.backend() != "jax":
        return Devices([keras.backend.backend()])
    import jax

    if name == "auto" and any(os.environ.get(v) for v in KERAS_DISTRIBUTION_VARIABLES):
        missing = [v for v in KERAS_DISTRIBUTION_VARIABLES if not os.environ.get(v)]
        if missing:
            raise ValueError(
                f"several hosts need all of {', '.join(KERAS_DISTRIBUTION_VARIABLES)}; "
                f"{', '.join(missing)} unset"
            )
        keras.distribution.initialize()
    devices = keras.distribution.list_devices()
    if name == "default" or len(devices) == 1:
        return Devices(devices[:1])
    # each process feeds its own rows of every global batch (`Devices.part`)
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
    )
    return Devices(devices, (jax.process_index(), jax.process_count()))


def is_tpu(strategy):
    if isinstance(strategy, Devices):
        return "tpu" in str(strategy.devices[0]).lower()
    import tensorflow as tf

    return isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))


def is_chief():
    """True for the process that writes checkpoints, summaries and the export: the only one,
    in a TF_CONFIG cluster the chief (or worker 0 when there is no chief), under Keras's
    distribution API process 0."""
    if os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID"):
        return os.environ["KERAS_DISTRIBUTION_PROCESS_ID"].strip() == "0"
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task", {})
    if not task:
        return True
    if "chief" in config.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0


def workers_agree(strategy, ok):
    """Whether every worker passes ok=True: under several workers a collective that waits for
    all of them (a barrier; a lost worker ends it, `naming_lost_workers`), `ok` itself
    otherwise."""
    if not in_multi_worker_mode(strategy):
        return ok
    if isinstance(strategy, Devices):  # JAX's processes: a gather over all of them
        import numpy as np
        from jax.experimental import multihost_utils

        return not multihost_utils.process_allgather(np.int32(not ok)).any()
    import tensorflow as tf

    failures = strategy.experimental_distribute_values_from_function(
        lambda _: tf.constant(0.0 if ok else 1.0)
    )
    return float(strategy.reduce("SUM", failures, axis=None)) == 0.0


def in_multi_worker_mode(strategy):
    """True under a MultiWorkerMirroredStrategy of more than one worker, or JAX's devices of
    more than one process."""
    if isinstance(strategy, Devices):
        return strategy.part[1] > 1
    return several_workers(strategy)


class WorkerLost(RuntimeError):
    """Another process of the run's cluster ended or could not be reached."""


# What JAX says when a collective's peer process is gone: Gloo's (CPUs) or NCCL's (GPUs) failed
# operation, a lost connection, a missed heartbeat. It raises that as a JaxRuntimeError, or as a
# ValueError from a jitted call (`jax.device_put`'s check that every process passes one value).
JAX_LOST_PEER = re.compile(r"(Gloo|NCCL)\b.* failed|closed by peer|reset by peer|heartbeat timeout")


@contextlib.contextmanager
def naming_lost_workers(backup):
    """Turns the error of a collective whose peer is gone (its process ended or its machine
    cannot be reached) into one WorkerLost naming that worker and what to do: restart them all
    with the same command, which resumes from `backup`. TensorFlow raises it when the connection
    closes or the coordination service misses the worker's heartbeats; JAX's collectives when
    the connection closes (a silent machine: JAX's own coordination service ends the process
    once its heartbeats time out)."""
    try:
        yield
    except Exception as error:
        lost = lost_worker(error)
        if lost is None:
            raise
        # TensorFlow's {{function_node ...}} names the op, not the cause
        reason = textwrap.shorten(re.sub(r"\{\{.*?\}\}", "", str(error)), 200, placeholder=" ...")
        raise WorkerLost(
            f"{lost} was lost ({reason}): restart every worker with the same command to resume "
            f"from the backup in {backup}"
        ) from error


def lost_worker(error):
    """The worker whose loss `error` reports, named with its address where the cluster's
    variables give it ("worker 1 (127.0.0.1:2222)", "process 1"); None when `error` is no
    collective's failure of a cluster."""
    backend = keras.backend.backend()
    if backend == "tensorflow" and os.environ.get("TF_CONFIG"):
        import tensorflow as tf

        lost = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError)
        return lost_tf_worker(str(error)) if isinstance(error, lost) else None
    if backend == "jax" and os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID"):
        import jax

        raised = isinstance(error, (jax.errors.JaxRuntimeError, ValueError))
        if raised and JAX_LOST_PEER.search(str(error)):
            return lost_jax_process()
    return None


def lost_tf_worker(message):
    """The TF_CONFIG task other than this one that `message` names (TensorFlow names a
    collective's remote peer as /job:worker/replica:0/task:1), else the only other one; None
    in a cluster of one."""
    config = json.loads(os.environ["TF_CONFIG"])
    cluster, task = config.get("cluster", {}), config.get("task", {})
    own = (task.get("type"), int(task.get("index", 0)))
    tasks = {(job, i): address for job in cluster for i, address in enumerate(cluster[job])}
    named = {(job, int(i)) for job, i in re.findall(r"/job:(\w+)/replica:\d+/task:(\d+)", message)}
    others = [t for t in tasks if t != own]
    if not others:
        return None
    candidates = [t for t in others if t in named] or others
    if len(candidates) != 1:
        return "a worker"
    job, index = candidates[0]
    return f"{job} {index} ({tasks[job, index]})"


def lost_jax_process():
    """The process other than this one of KERAS_DISTRIBUTION_*, with its address when the
    addresses list every process; "a process" among more than two, None alone."""
    own = int(os.environ["KERAS_DISTRIBUTION_PROCESS_ID"])
    count = int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES") or 0)
    if count < 2:
        return None
    if count > 2:
        return "a process"
    other = 1 - own
    addresses = os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES", "").split(",")
    return f"process {other}" + (f" ({addresses[other]})" if len(addresses) == count else "")


def end_at_exit(status):
    """Makes this process end at its exit with `status`, before JAX's distributed shutdown:
    its barrier would wait for a lost process until the heartbeats time out, then abort.
    atexit runs the functions registered last first."""

    def end():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)

    atexit.register(end)


def bf16_capable_gpus():
    """True when there are GPUs and all of them are Ampere (compute capability 8.0) or newer."""
    if keras.backend.backend() == "jax":
        import jax

        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        capabilities = [str(getattr(g, "compute_capability", "0.0")).split(".") for g in gpus]
        return bool(gpus) and all(tuple(map(int, c)) >= (8, 0) for c in capabilities)
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

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
