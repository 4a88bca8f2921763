import contextlib
import fcntl
import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pytest_collection_modifyitems(items):
    """The slow tests first, then the quick ones (a stable sort); in each, the tests of modules
    that one worker runs together (`one_worker_runs`) before the others."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("slow") is None,
            not one_worker_runs(item.nodeid.split("::")[0]),
        )
    )


@functools.cache
def one_worker_runs(module):
    """Whether one pytest worker runs all the tests of `module` (its path in a test id, from the
    repository root): those of a module that defines a fixture of module scope, which it then
    makes once."""
    return '@pytest.fixture(scope="module")' in (ROOT / module).read_text()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test`'s scheduling (`--dist loadscope --no-loadscope-reorder`): a unit of work is
    one test, or the tests of a module that `one_worker_runs`; a worker gets the next unit, in
    the order above, when it has at most two tests left, so the workers start on the long work
    and end together on quick tests. Other --dist modes are pytest-xdist's own."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerAModule(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            module = nodeid.split("::")[0]
            return module if one_worker_runs(module) else nodeid

        def remove_node(self, node):
            """A crashed worker's unfinished units go back to the queue, its finished ones not
            (a finished unit sent again would run nothing, and its worker would wait)."""
            work = self.assigned_work[node]
            for scope in [scope for scope, tests in work.items() if all(tests.values())]:
                del work[scope]
            return super().remove_node(node)

    return OneWorkerAModule(config, log)


@pytest.fixture(autouse=True)
def _seed_and_policy():
    """Every test starts from the same seed and the float32 policy."""
    keras.utils.set_random_seed(1234)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


ROOT = pathlib.Path(__file__).resolve().parents[1]
# The environment of a process (and its children) on a machine without TensorFlow: see
# tests/without_tensorflow/sitecustomize.py.
WITHOUT_TENSORFLOW = {
    "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "tests" / "without_tensorflow"), str(ROOT / "tests"), str(ROOT)]
    )
}

# JAX on the CPU, XLA's backend optimizations off: the tests' tiny programs compile in about half
# the time, and what a test compares runs under the same flags.
FAST_XLA_FLAGS = "--xla_backend_optimization_level=0"
JAX_CPU = {"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": FAST_XLA_FLAGS}
# The same, on two CPU devices.
JAX_ON_TWO_CPUS = {
    **JAX_CPU,
    "XLA_FLAGS": f"{FAST_XLA_FLAGS} --xla_force_host_platform_device_count=2",
}


# The first lines of a script that `run_script` runs in a fresh process with two logical CPU
# devices, which must be set before TensorFlow initializes; the tests' folder is on its path.
TWO_CPUS = """\
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[1])
"""


def run_script(script, *args, env=None):
    """`python -c SCRIPT TESTS ARGS` (TESTS: the tests' folder) with `env` (as `run_python`):
    the JSON of the line it prints as `RESULT {...}`."""
    completed = run_python("-c", script, ROOT / "tests", *args, env=env, timeout=600)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, completed.stderr[-3000:]
    return json.loads(lines[0][len("RESULT ") :])


def run_python(*args, env=None, timeout=300, status=0, stdin=None, cwd=ROOT, program=None):
    """`python ARGS` (from the repository root; `program ARGS` if given, e.g. an installed
    command) with `env` over this process's environment (a value of None removes the variable);
    asserts its exit status, returns the CompletedProcess."""
    environment = {**os.environ, **(env or {})}
    completed = subprocess.run(
        [str(program or sys.executable), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
        env={key: value for key, value in environment.items() if value is not None},
    )
    assert completed.returncode == status, completed.stdout[-2000:] + completed.stderr[-4000:]
    return completed


def write_number_data(root, sizes=(2000, 12, 12)):
    """tsv:`root` data of German number words to English ones: train, validation and test
    splits of `sizes` pairs; returns `root`."""
    for split, n, seed in zip(("train", "validation", "test"), sizes, range(3)):
        lines = (f"{de}\t{en}\n" for de, en in number_pairs(n, seed))
        (root / f"{split}.tsv").write_text("".join(lines))
    return root


def tiny_flags(data):
    """`training.train` flags for a tiny model on tsv:`data` that trains in seconds."""
    return [
        "--preset",
        "tiny",
        "--set",
        "max_length=64",
        "--dataset",
        f"tsv:{data}",
        "--vocab-size",
        "300",
        "--max-length",
        "32",
        "--tokens-per-batch",
        "512",
    ]


def random_ids(rng, batch, length, vocab_size, low=4):
    """Non-padding token ids (0-3 are pad/unk/bos/eos)."""
    return rng.integers(low, vocab_size, (batch, length)).astype("int32")


GERMAN_WORDS = (
    "der die das Haus ist groß klein und ein eine Katze Hund schläft läuft schnell heute Straße "
    "grün"
).split()
ENGLISH_WORDS = "the house is big small and a cat dog sleeps runs fast today street green".split()


def synthetic_pairs(n, seed=0, max_words=30):
    """German-like and English-like sentences of 1 to max_words words, for pipeline tests."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        de = " ".join(rng.choice(GERMAN_WORDS, rng.integers(1, max_words + 1)))
        en = " ".join(rng.choice(ENGLISH_WORDS, rng.integers(1, max_words + 1)))
        pairs.append((de[0].upper() + de[1:] + ".", en[0].upper() + en[1:] + "."))
    return pairs


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    """A small shared vocabulary trained on both languages of the synthetic corpus."""
    from keras_transformer import SubwordTokenizer

    texts = [side for pair in synthetic_pairs(400) for side in pair]
    path = tmp_path_factory.mktemp("tokenizer") / "shared.model"
    return SubwordTokenizer.train(texts, vocab_size=400, path=path)


GERMAN_NUMBERS = "null eins zwei drei vier fünf sechs sieben acht neun".split()
ENGLISH_NUMBERS = "zero one two three four five six seven eight nine".split()


def number_pairs(n, seed):
    """A synthetic translation task: German number words to English ones, 2 to 6 words."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        digits = rng.integers(0, 10, rng.integers(2, 7))
        pairs.append(
            (
                " ".join(GERMAN_NUMBERS[d] for d in digits),
                " ".join(ENGLISH_NUMBERS[d] for d in digits),
            )
        )
    return pairs


def shared_directory(tmp_path_factory, worker_id):
    """The run's directory above each pytest-xdist worker's own, where what one worker makes
    the others find."""
    shared = tmp_path_factory.getbasetemp()
    return shared if worker_id == "master" else shared.parent


@contextlib.contextmanager
def made_once(directory, name):
    """Holds the lock `name` of the run's shared `directory`: the first worker makes the thing,
    the others wait and find it."""
    with open(directory / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def wheel(tmp_path_factory, worker_id):
    """The project's wheel, built once a run (as `pip wheel` builds it) from a copy of the
    checkout's files: those git tracks, and new ones it does not ignore."""
    shared = shared_directory(tmp_path_factory, worker_id)
    with made_once(shared, "wheel"):
        built = sorted((shared / "wheel").glob("*.whl"))
        if not built:
            source = shared / "wheel-source"
            listed = subprocess.run(
                ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                cwd=ROOT, capture_output=True, check=True,
            ).stdout.decode()  # fmt: skip
            for name in filter(None, listed.split("\0")):
                if (ROOT / name).is_file():
                    (source / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / name, source / name)
            pip("wheel", "--no-deps", "--wheel-dir", shared / "wheel", source)
            built = sorted((shared / "wheel").glob("*.whl"))
    return built[0]


def pip(*args, python=None):
    """This environment's pip: `pip ARGS`, or with `python` (a venv's) `pip install ARGS` into
    that venv, the versions of what it installs held to this environment's (`pip freeze`)."""
    command = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]
    if python is not None:
        constraints = pathlib.Path(python).parent.parent / "constraints.txt"
        frozen = subprocess.run(
            [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        constraints.write_text(frozen)
        command += ["--python", str(python), "install", "--constraint", str(constraints)]
    completed = subprocess.run([*command, *map(str, args)], capture_output=True, text=True)
    assert completed.returncode == 0, f"pip {' '.join(map(str, args))}: {completed.stderr[-3000:]}"


def new_venv(directory):
    """A fresh venv in `directory` (without pip: `pip` installs into it); its bin/ folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    return directory / "bin"


@pytest.fixture(scope="session")
def tensorflow_free(wheel, tmp_path_factory, worker_id):
    """The bin/ folder of a venv made with the TensorFlow-free install of the README,
    `pip install "keras-transformer[jax]"` (from the wheel): JAX, no TensorFlow."""
    shared = shared_directory(tmp_path_factory, worker_id)
    with made_once(shared, "tensorflow-free"):
        venv = shared / "tensorflow-free"
        if not (venv / "installed").is_file():
            shutil.rmtree(venv, ignore_errors=True)  # what a failed install left
            pip(f"{wheel}[jax]", python=new_venv(venv) / "python")
            (venv / "installed").touch()
    return venv / "bin"


@pytest.fixture(scope="session")
def number_translator(tmp_path_factory, worker_id):
    """A tiny model trained (1000 steps) until it translates the task exactly, with its
    tokenizer and 20 held-out pairs. Trained once a run: the first pytest worker to need it
    saves it in the run's directory, above each worker's own, where the others load it."""
    import keras_transformer as kt

    shared = shared_directory(tmp_path_factory, worker_id)
    directory = shared / "number-translator"
    with made_once(shared, "number-translator"):
        if not (directory / "model.keras").is_file():
            train_number_translator(directory)
    model = keras.saving.load_model(directory / "model.keras")
    tokenizer = kt.SubwordTokenizer.load(directory / "tokenizer.model")
    held_out = [pair for pair in number_pairs(40, seed=99) if pair not in NUMBER_TRAINING][:20]
    return model, tokenizer, held_out


NUMBER_TRAINING = number_pairs(4000, seed=0)


def train_number_translator(directory):
    """`number_translator`'s model and tokenizer, trained and saved in `directory` (the model
    last, under its final name only once it is whole)."""
    import keras_transformer as kt
    from keras_transformer.data import Corpus, make_batches

    keras.utils.set_random_seed(0)
    directory.mkdir(exist_ok=True)
    texts = [side for pair in NUMBER_TRAINING for side in pair]
    tokenizer = kt.SubwordTokenizer.train(texts, 400, directory / "tokenizer.model")
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, dropout=0.0, warmup_steps=100, max_length=32
    )
    model = kt.build_transformer(config)
    model.compile(optimizer=kt.create_optimizer(config), loss=kt.LabelSmoothedCrossEntropy())
    batches = make_batches(
        Corpus(NUMBER_TRAINING).dataset(), tokenizer, 512, 16, repeat=True, seed=0
    )
    model.fit(batches, steps_per_epoch=100, epochs=10, shuffle=False, verbose=0)
    model.save(directory / "partial.keras")
    (directory / "partial.keras").rename(directory / "model.keras")
