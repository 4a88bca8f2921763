"""Two training processes on 127.0.0.1, as two machines run them (docs/backends-and-gpus.md,
"Two processes on one machine first"): TensorFlow's `--strategy multi_worker` (TF_CONFIG) and
JAX's processes (KERAS_DISTRIBUTION_*). One test per engine, in as few launches as the checks
allow (each process pays its imports): one process trains beside the two workers as their
reference; at a backup the workers' weights equal its own, then worker 1 is killed, which ends
worker 0 with one line naming it; the same command on both resumes from the backup and
finishes; worker 1 never writes in the run directory."""

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import JAX_CPU, JAX_ON_TWO_CPUS, WITHOUT_TENSORFLOW

import keras_transformer as kt
from keras_transformer_cli.checkpoints import checkpoint_path, read_checkpoint
from training import binarize, context, runtime, train
from training.plan import TrainingPlan

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEPS = 12  # the run's steps, 2 an epoch
COMPARED = 4  # the step of the backup at which the runs are compared and worker 1 is killed
WAIT_SECONDS = 300


@pytest.fixture(scope="module")
def letters(tmp_path_factory):
    """tsv:DIR data whose batches all have one shape (one program to trace or compile): 6
    letters, reversed, 7 tokens with the end of sentence."""
    root = tmp_path_factory.mktemp("letters")
    rng = np.random.default_rng(0)
    for split, count in (("train", 400), ("validation", 8), ("test", 8)):
        words = (rng.choice(list("abcdefgh"), 6) for _ in range(count))
        lines = (f"{' '.join(w)}\t{' '.join(w[::-1])}\n" for w in words)
        (root / f"{split}.tsv").write_text("".join(lines))
    return root


@pytest.fixture(scope="module")
def binarized(letters, tmp_path_factory):
    """The letters binarized with a 300-piece vocabulary (whose tokenizer the TensorFlow test
    shares)."""
    out = tmp_path_factory.mktemp("binarized") / "letters"
    flags = ["--vocab-size", "300", "--max-length", "8", "--output", str(out)]
    binarize.main(["--dataset", f"tsv:{letters}", *flags])
    return out


def run_flags(dataset, *extra):
    """A tiny model without dropout (the replicas' dropout masks would differ between the runs
    compared), a backup every 2 steps, STEPS steps."""
    return [
        *("--preset", "tiny", "--set", "max_length=64", "--set", "dropout=0.0"),
        *("--dataset", dataset, "--max-length", "8", "--tokens-per-batch", "128"),
        *("--steps", str(STEPS), "--steps-per-epoch", "2", "--bleu-sentences", "0"),
        *("--beam-size", "1", *map(str, extra)),
    ]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """`python -m training.train ARGS` with `env` over this environment, its stdout and stderr
    written to LOGS/NAME.out and .err; with `audited`, Python's writes under that folder are
    listed in LOGS/NAME.writes (tests/audit_writes). `started` lists them all, for the end of
    a test (`stop_every_process`)."""

    started = []

    def __init__(self, args, env, logs, name, audited=None):
        self.stdout, self.stderr = logs / f"{name}.out", logs / f"{name}.err"
        self.writes = logs / f"{name}.writes"
        if audited:
            path = [
                str(ROOT / "tests" / "audit_writes"),
                env.get("PYTHONPATH", os.environ.get("PYTHONPATH")),
            ]
            env = {**env, "AUDITED_DIR": str(audited), "AUDIT_LOG": str(self.writes)}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, path))
        with self.stdout.open("w") as out, self.stderr.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "training.train", *args],
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=out,
                stderr=err,
            )
        Process.started.append(self)

    def wait(self):
        """Its exit status, once it ends (within WAIT_SECONDS)."""
        try:
            return self.process.wait(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"still running after {WAIT_SECONDS} s: {self.output()}") from None

    def output(self):
        return self.stdout.read_text()[-2000:] + self.stderr.read_text()[-4000:]

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


@pytest.fixture(autouse=True)
def stop_every_process():
    """Kills what a test started and left running (a failed test's processes)."""
    yield
    while Process.started:
        process = Process.started.pop()
        if process.process.poll() is None:
            process.kill()


def backed_up_step(run_dir):
    """The step of the backup in `run_dir`, -1 without one."""
    metadata = run_dir / "backup" / "backup.json"
    return json.loads(metadata.read_text())["step"] if metadata.is_file() else -1


def kill_at_backup(runs):
    """Kills the first process of each run ({run directory: its processes}) once the run's
    backup holds step COMPARED or a later one; none may end before (within WAIT_SECONDS)."""
    deadline, pending = time.monotonic() + WAIT_SECONDS, dict(runs)
    while pending:
        for run_dir, processes in list(pending.items()):
            for process in processes:
                assert process.process.poll() is None, f"ended early: {process.output()}"
            if backed_up_step(run_dir) >= COMPARED:
                processes[0].kill()
                del pending[run_dir]
        assert time.monotonic() < deadline, f"no backup of step {COMPARED} in {list(pending)}"
        time.sleep(0.05)


def assert_same_weights(run_dir, reference_dir, tolerance):
    """The checkpoints of step COMPARED of both runs hold the same weights, to `tolerance`."""
    ours = read_checkpoint(checkpoint_path(run_dir / "checkpoints", COMPARED))
    theirs = read_checkpoint(checkpoint_path(reference_dir / "checkpoints", COMPARED))
    assert ours.keys() == theirs.keys()
    for name, value in ours.items():
        np.testing.assert_allclose(value, theirs[name], rtol=0, atol=tolerance, err_msg=name)


class Cluster:
    """Two workers of the command `args` on this machine, each with its entry of `environments`
    over this environment, their output in `logs`; their writes in `run_dir` audited."""

    def __init__(self, args, environments, run_dir, logs):
        self.args, self.environments, self.run_dir, self.logs = args, environments, run_dir, logs
        self.rounds = []

    def start(self):
        """Starts both workers; returns [worker 0, worker 1]."""
        name = f"round-{len(self.rounds)}"
        self.rounds.append(
            [
                Process(self.args, env, self.logs, f"{name}-{i}", audited=self.run_dir)
                for i, env in enumerate(self.environments)
            ]
        )
        return self.rounds[-1]

    def assert_worker_0_names_the_loss(self, lost):
        """Worker 0 of the last round, worker 1 killed, ends with status 1 and one line naming
        `lost` (worker 1) and what to do; returns the step its backup holds."""
        worker = self.rounds[-1][0]
        assert worker.wait() == 1, worker.output()
        stderr = worker.stderr.read_text()
        assert "Traceback" not in stderr
        assert re.fullmatch(
            rf"error: {re.escape(lost)} was lost \(.+\): restart every worker with the same "
            rf"command to resume from the backup in {re.escape(str(self.run_dir / 'backup'))}",
            stderr.strip().splitlines()[-1],
        ), stderr[-3000:]
        step = backed_up_step(self.run_dir)
        assert COMPARED <= step < STEPS
        return step

    def assert_resumed(self, step):
        """The same command on both workers resumes from the backup's `step` and finishes."""
        for process in self.start():
            assert process.wait() == 0, process.output()
            stderr = process.stderr.read_text()
            assert f"resumed from the backup in {self.run_dir / 'backup'} at step {step}" in stderr
            assert f"training stopped at step {STEPS}" in stderr
        assert (self.run_dir / "model.keras").is_file()

    def assert_only_worker_0_wrote(self):
        """Worker 0 wrote in the run directory in every round (its backups, checkpoints, model),
        worker 1 nothing: no write of Python's, no file named with its pid (as TensorFlow's own
        writers name their event files)."""
        for chief, worker in self.rounds:
            assert str(self.run_dir) in chief.writes.read_text()
            assert not worker.writes.exists(), worker.writes.read_text()
            pid = f".{worker.process.pid}."
            assert not [path for path in self.run_dir.rglob("*") if pid in path.name]


@pytest.mark.slow
def test_two_tensorflow_workers_train_as_one_process_and_resume_after_losing_one(
    letters, binarized, tmp_path
):
    """`--strategy multi_worker`, two workers on 127.0.0.1 (TF_CONFIG), against one process
    mirroring two CPU devices (`--strategy mirrored --cpu-devices 2`): both cut each global
    batch of the same pipeline (same data, tokenizer and seed) into one share per replica, the
    workers' by auto-sharding the data, and sum the two replicas' gradients, by other
    collectives: equal to float32 rounding."""
    flags = run_flags(f"tsv:{letters}", "--tokenizer", binarized / "tokenizer.model")
    addresses = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    cluster = Cluster(
        [*flags, "--strategy", "multi_worker", "--run-dir", tmp_path / "run"],
        [
            {"TF_CONFIG": json.dumps({"cluster": {"worker": addresses}, "task": task})}
            for task in ({"type": "worker", "index": i} for i in range(2))
        ],
        tmp_path / "run",
        tmp_path,
    )
    one = [*flags, "--strategy", "mirrored", "--cpu-devices", "2", "--run-dir", tmp_path / "one"]
    one = Process(one, {}, tmp_path, "one")
    worker_0, worker_1 = cluster.start()
    kill_at_backup({tmp_path / "one": [one], cluster.run_dir: [worker_1, worker_0]})
    step = cluster.assert_worker_0_names_the_loss(f"worker 1 ({addresses[1]})")
    assert_same_weights(cluster.run_dir, tmp_path / "one", 1e-6)
    cluster.assert_resumed(step)
    cluster.assert_only_worker_0_wrote()
    assert (cluster.run_dir / "export").is_dir()


@pytest.mark.slow
def test_two_jax_processes_train_as_one_process_and_resume_after_losing_one(binarized, tmp_path):
    """Two JAX processes on 127.0.0.1 (KERAS_DISTRIBUTION_*, one CPU device each, Gloo's
    collectives) train from binarized data, each feeding its own rows of every global batch,
    against one process with two CPU devices: the same global batches, cut the same way, under
    keras.distribution.DataParallel (equal to float32 rounding). TensorFlow cannot be imported
    in them, as on the GPU machines this path serves."""
    flags = run_flags(f"binarized:{binarized}")
    addresses = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    jax = {**WITHOUT_TENSORFLOW, **JAX_CPU}
    cluster = Cluster(
        [*flags, "--run-dir", tmp_path / "run"],
        [
            {
                **jax,
                "KERAS_DISTRIBUTION_JOB_ADDRESSES": ",".join(addresses),
                "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
                "KERAS_DISTRIBUTION_PROCESS_ID": str(i),
            }
            for i in range(2)
        ],
        tmp_path / "run",
        tmp_path,
    )
    two_devices = {**jax, **JAX_ON_TWO_CPUS}
    one = Process([*flags, "--run-dir", tmp_path / "one"], two_devices, tmp_path, "one")
    worker_0, worker_1 = cluster.start()
    kill_at_backup({tmp_path / "one": [one], cluster.run_dir: [worker_1, worker_0]})
    assert "DataParallel over 2 devices in 2 processes" in worker_0.stderr.read_text()
    step = cluster.assert_worker_0_names_the_loss(f"process 1 ({addresses[1]})")
    assert_same_weights(cluster.run_dir, tmp_path / "one", 1e-6)
    cluster.assert_resumed(step)
    cluster.assert_only_worker_0_wrote()
    for worker in cluster.rounds[-1]:
        assert worker.stderr.read_text().endswith("tensorflow imported: False\n")


TF_LOST_PEER = (
    "{{function_node __wrapped__CollectiveReduceV2_/job:worker/replica:0/task:0/device:CPU:0}}"
    " Collective ops is aborted by: Socket closed Additional GRPC error information from remote "
    "target /job:worker/replica:0/task:1 while calling /tensorflow.WorkerService/RecvBuf"
)
GLOO_LOST_PEER = (
    "UNKNOWN: Gloo AllGather failed: Read error [127.0.0.1]:4: Connection reset by peer"
)


def lost(error):
    """The WorkerLost that `error`, raised in training, becomes."""
    with pytest.raises(runtime.WorkerLost) as raised:
        with runtime.naming_lost_workers(pathlib.Path("run/backup")):
            raise error
    return str(raised.value)


def test_a_lost_worker_is_named_with_its_address_and_what_to_do(monkeypatch):
    import tensorflow as tf

    workers = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    task = {"type": "worker", "index": 0}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": workers, "task": task}))
    assert lost(tf.errors.UnavailableError(None, None, TF_LOST_PEER)) == (
        "worker 1 (127.0.0.1:2) was lost (Collective ops is aborted by: Socket closed Additional "
        "GRPC error information from remote target /job:worker/replica:0/task:1 while calling "
        "/tensorflow.WorkerService/RecvBuf): restart every worker with the same command to "
        "resume from the backup in run/backup"
    )
    three = {"worker": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": three, "task": task}))
    assert lost(tf.errors.DeadlineExceededError(None, None, "timed out")).startswith(
        "a worker was lost (timed out): restart every worker"
    )
    with pytest.raises(ValueError, match="^--max-length"):  # not a collective's: as it is
        with runtime.naming_lost_workers(pathlib.Path("run/backup")):
            raise ValueError("--max-length 8 exceeds the model's max_length=4")
    alone = {"cluster": {"worker": ["127.0.0.1:1"]}, "task": task}
    monkeypatch.setenv("TF_CONFIG", json.dumps(alone))
    with pytest.raises(tf.errors.UnavailableError):  # no other worker to lose
        with runtime.naming_lost_workers(pathlib.Path("run/backup")):
            raise tf.errors.UnavailableError(None, None, "a file system's error")

    monkeypatch.delenv("TF_CONFIG")
    monkeypatch.setattr(runtime.keras.backend, "backend", lambda: "jax")
    monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "127.0.0.1:1,127.0.0.1:2")
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
    monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "0")
    assert lost(ValueError(GLOO_LOST_PEER)).startswith(
        f"process 1 (127.0.0.1:2) was lost ({GLOO_LOST_PEER}): restart every worker"
    )
    monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "127.0.0.1:1")
    monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "1")
    assert lost(ValueError(GLOO_LOST_PEER)).startswith("process 0 was lost (")


def test_several_jax_processes_refuse_text_data_and_a_time_limit(tmp_path):
    """Each process reads its own rows of binarized data's batches; all must stop at one step."""
    processes = runtime.Devices(["cpu:0", "cpu:1"], part=(0, 2))
    parser = train.build_parser()
    flags = ["--dataset", f"tsv:{tmp_path}", "--run-dir", str(tmp_path / "run")]
    plan = TrainingPlan.from_flags(parser.parse_args(flags))
    with pytest.raises(ValueError) as refused:
        context.check_several_processes(plan, processes, binarized=None)
    assert str(refused.value) == (
        f"--dataset tsv:{tmp_path}: several JAX processes train from binarized data, each "
        f"reading its own rows of every batch: binarize it once (python -m training.binarize "
        f"--dataset tsv:{tmp_path} --output DIR) and give --dataset binarized:DIR"
    )
    context.check_several_processes(plan, runtime.Devices(["cpu:0", "cpu:1"]), binarized=None)
    plan = TrainingPlan.from_flags(parser.parse_args([*flags, "--max-minutes", "5"]))
    config = kt.TransformerConfig.preset("tiny", vocab_size=300)
    with pytest.raises(ValueError, match="^--max-minutes cannot be used with several workers"):
        context.check_batch_budget(plan, config, processes)
