"""Binarized data (`python -m training.binarize`, keras_transformer.data.binarized): the same
batches as the tf.data pipeline, a JAX run on a machine without TensorFlow that trains, backs up,
resumes and writes model.keras which TensorFlow then scores and exports, data parallelism over
two devices, --steps-per-execution, and the bad input each of them refuses."""

import importlib.metadata
import json
import pathlib
import re
import shlex
import shutil

import keras
import numpy as np
import pytest
from conftest import (
    JAX_ON_TWO_CPUS,
    WITHOUT_TENSORFLOW,
    run_python,
    tiny_flags,
    write_number_data,
)

import keras_transformer as kt
from keras_transformer.data import binarized, make_batches, read_tsv
from keras_transformer.data.binarized import Binarized, BinarizedError
from keras_transformer.data.buckets import static_boundaries
from training import binarize, train

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def text_data(tmp_path_factory):
    return write_number_data(tmp_path_factory.mktemp("numbers"))


def binarize_numbers(text_data, out, max_length=32, *extra):
    """Binarizes the number data into `out` with a 300-piece vocabulary."""
    flags = ["--vocab-size", "300", "--max-length", str(max_length), "--output", str(out)]
    binarize.main(["--dataset", f"tsv:{text_data}", *flags, *extra])
    return out


@pytest.fixture(scope="module")
def data(text_data, tmp_path_factory):
    """The number data binarized with a 300-piece vocabulary, --max-length 32."""
    out = binarize_numbers(text_data, tmp_path_factory.mktemp("binarized") / "numbers")
    return out


def pairs_of(batch):
    """The batch's rows as a sorted tuple of (source, target, target_out) id tuples."""
    inputs, target_out = batch[0], batch[1]
    rows = zip(inputs["source"], inputs["target"], target_out)
    return tuple(sorted(tuple(tuple(side) for side in row) for row in rows))


@pytest.mark.parametrize("budget, max_length, multiple", [(512, 32, 1), (300, 20, 2)])
def test_binarized_batches_are_the_tf_data_pipelines(data, text_data, budget, max_length, multiple):
    """One unshuffled pass: the same batches, pair for pair and padding for padding, as
    make_batches with static shapes, in the order their buckets fill (part-filled ones last)."""
    tokenizer = kt.SubwordTokenizer.load(data / "tokenizer.model")
    texts = read_tsv(text_data / "train.tsv").dataset()
    expected = make_batches(
        texts,
        tokenizer,
        budget,
        max_length,
        shuffle_buffer=0,
        batch_size_multiple=multiple,
        static_shapes=True,
    )
    expected = [pairs_of(batch) for batch in expected.as_numpy_iterator()]
    found = Binarized(data).batches(
        "train", budget, max_length, repeat=False, shuffle=False, batch_size_multiple=multiple
    )
    found = [pairs_of(batch) for batch in found]
    full = len(found) - 12  # the part-filled buckets come last, in an order of their own
    assert found[:full] == expected[:full] and sorted(found) == sorted(expected)
    report = Binarized(data).report("train", budget, max_length, multiple)
    assert report.kept == sum(len(batch) for batch in found) and report.batches == len(found)
    if max_length < 32:  # the pairs the folder holds beyond the run's --max-length, counted
        assert report.dropped == {f"longer than max_length={max_length} tokens": 2000 - report.kept}


def test_shuffled_repeated_batches_are_full_within_budget_and_weighed(data):
    folder = Binarized(data)
    shapes, rows = set(), 0
    batches = folder.batches("train", 512, seed=3, batch_size_multiple=2)
    for _, (inputs, target_out, weights) in zip(range(200), batches):  # two passes and more
        assert inputs["source"].shape == inputs["target"].shape == target_out.shape
        assert inputs["source"].size <= 512 and len(target_out) % 2 == 0
        # every batch of a repeated stream is its bucket's full size
        assert len(target_out) == 512 // target_out.shape[1] // 2 * 2
        np.testing.assert_allclose(weights.sum(), 1.0, rtol=1e-6)
        assert (weights[target_out == 0] == 0).all() and (inputs["target"][:, 0] == 2).all()
        shapes.add(target_out.shape)
        rows += len(target_out)
    assert rows > 2 * 2000 and len(shapes) == len(static_boundaries(32)) == 4  # few programs
    assert {shape[1] for shape in shapes} == {8, 16, 24, 32}  # whole tiles of 8
    first, again = (next(folder.batches("train", 512, seed=s)) for s in (3, 3))
    other = next(folder.batches("train", 512, seed=4))
    assert pairs_of(first) == pairs_of(again) != pairs_of(other)
    # each host's share of a global batch, weighed over the whole batch
    whole = next(folder.batches("train", 512, seed=5, batch_size_multiple=2))
    halves = [
        next(folder.batches("train", 512, seed=5, batch_size_multiple=2, part=(i, 2)))
        for i in range(2)
    ]
    np.testing.assert_array_equal(np.concatenate([h[1] for h in halves]), whole[1])
    np.testing.assert_allclose(sum(h[2].sum() for h in halves), 1.0, rtol=1e-6)


def test_binarize_counts_what_it_drops_and_keeps_the_texts(text_data, tmp_path):
    out = binarize_numbers(text_data, tmp_path / "short", 6, "--splits", "train", "validation")
    index = json.loads((out / "index.json").read_text())
    assert index["max_length"] == 6 and index["languages"] == ["source", "target"]
    assert index["tokenizer"]["sha256"] == binarized.sha256_of(out / "tokenizer.model")
    train_split = index["splits"]["train"]
    too_long = train_split["dropped"]["longer than max_length=6 tokens"]
    assert train_split["read"] == 2000 and train_split["pairs"] + too_long == 2000 and too_long
    assert sorted(index["splits"]) == ["train", "validation"]
    folder, tokenizer = Binarized(out), kt.SubwordTokenizer.load(out / "tokenizer.model")
    texts = folder.pairs("validation")  # every pair, dropped or not: the references
    assert texts == [
        tuple(line.split("\t")) for line in (text_data / "validation.tsv").read_text().splitlines()
    ]
    split, kept = folder.split("validation"), 0
    for source, target in texts:
        ids = [tokenizer.tokenize([side]).numpy()[0] for side in (source, target)]
        if max(map(len, ids)) + 1 <= 6:
            for side, stored in zip(ids, split.pair(kept)):
                np.testing.assert_array_equal(stored, side)
            kept += 1
    assert kept == len(split) == index["splits"]["validation"]["pairs"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--vocab-size", "300", "--tokenizer", "t.model"], "give one of --tokenizer, --run-dir"),
        (["--tokenizer", "/no/such.model"], "--tokenizer /no/such.model: no such file"),
        (["--run-dir", "/no/such/run"], "--run-dir /no/such/run: no tokenizer.model in it"),
        (["--splits", "validation"], "--splits must include train"),
        (["--max-length", "2"], "leaves no pair within --max-length 2"),
        (["--splits", "train", "dev"], "--splits dev: the split of tsv:"),
        (["--sentence-repeats", "3"], "--sentence-repeats up-samples the sentences"),
        (["--tag-phrases"], "--tag-phrases tags the phrase pairs: it needs --phrases"),
        (["--sentence-alternatives"], "--sentence-alternatives adds sentence pairs to the phrase"),
    ],
)
def test_binarize_refuses_bad_input_and_writes_nothing(text_data, tmp_path, capsys, extra, message):
    out = tmp_path / "deep" / "out"
    with pytest.raises(SystemExit) as exit_info:
        binarize.main(["--dataset", f"tsv:{text_data}", "--output", str(out), *extra])
    assert exit_info.value.code == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "deep").exists()


def test_binarize_never_writes_over_a_folder(data, text_data, capsys):
    before = {p: p.read_bytes() for p in data.iterdir()}
    with pytest.raises(SystemExit):
        binarize.main(["--dataset", f"tsv:{text_data}", "--output", str(data)])
    assert f"--output {data} exists; choose another or remove it" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in data.iterdir()} == before


def damaged(data, tmp_path, damage):
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    damage(copy)
    return copy


def cut(path):
    path.write_bytes(path.read_bytes()[:-40])


def other_version(copy):
    index = json.loads((copy / "index.json").read_text())
    (copy / "index.json").write_text(json.dumps({**index, "version": 99}))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: cut(d / "train.source.ids.npy"), "train.source.ids.npy cannot be read"),
        (lambda d: (d / "train.target.offsets.npy").unlink(), "offsets.npy: no such file"),
        (lambda d: cut(d / "index.json"), "index.json cannot be read"),
        (other_version, "is version 99 of the binarized format; this keras-transformer reads"),
        (lambda d: (d / "index.json").unlink(), "is not binarized data"),
        (lambda d: cut(d / "tokenizer.model"), "is not the tokenizer the ids of"),
        (
            lambda d: shutil.copy(d / "validation.source.ids.npy", d / "train.source.ids.npy"),
            "do not hold the 2000 pairs",
        ),
    ],
)
def test_a_damaged_folder_is_refused_naming_the_file(data, tmp_path, damage, message):
    with pytest.raises(BinarizedError, match=message):
        Binarized(damaged(data, tmp_path, damage)).split("train")


def tiny_binarized_run(data, out, *extra, max_length=32):
    """conftest's tiny run flags, on the binarized folder (whose 300 pieces --vocab-size names),
    at --max-length `max_length` (16: two batch shapes to compile, not the folder's four)."""
    flags = [f"binarized:{data}" if flag == f"tsv:{data}" else flag for flag in tiny_flags(data)]
    flags[flags.index("--max-length") + 1] = str(max_length)
    return [*flags, "--bleu-sentences", "4", "--beam-size", "1", "--run-dir", str(out), *extra]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--vocab-size", "400"], "--vocab-size 400: --dataset binarized:"),
        (["--max-length", "48"], "was binarized with --max-length 32, which dropped"),
        (["--phrases"], "has none of its own (binarize with --phrases)"),
        (["--source-language", "de"], "--source-language de: "),
        (["--steps-per-execution", "3"], "--steps-per-epoch 1000 is not a multiple of --steps-per"),
        (
            ["--steps-per-epoch", "8", "--steps-per-execution", "4", "--checkpoint-every", "6"],
            "--checkpoint-every 6 is not a multiple of --steps-per-execution 4",
        ),
    ],
)
def test_training_from_binarized_data_refuses_flags_it_cannot_honour(
    data, tmp_path, capsys, extra, message
):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        train.main(tiny_binarized_run(data, out, "--steps", "8", *extra))
    assert exit_info.value.code == 1 and message in capsys.readouterr().err
    assert not out.exists()


def test_data_of_another_tokenizer_than_the_runs_is_refused(data, text_data, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "tokenizer.model").write_bytes(  # a run whose vocabulary is another
        kt.SubwordTokenizer.train(["ganz andere Wörter"] * 50, 300, tmp_path / "t").model_proto
    )
    before = {p: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(SystemExit):
        train.main(tiny_binarized_run(data, out, "--steps", "8"))
    assert (
        f"--dataset binarized:{data} was binarized with another tokenizer than the run's "
        f"{out / 'tokenizer.model'}" in capsys.readouterr().err
    )
    assert {p: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.slow
def test_steps_per_execution_act_at_its_multiples_and_a_resume_must_agree(data, tmp_path, capsys):
    """TensorFlow, in this process: with 4 steps per execution the checkpoints, the summaries
    and the backup fall at steps 4, 8, ...; a resume whose --steps-per-execution does not
    divide the backup's step is refused, naming both. At --max-length 16 the first two batches
    have one length and a later one another, which TensorFlow takes (Keras fixes the shape of a
    generator's first two batches where they agree)."""
    from keras_transformer_cli import checkpoints

    out = tmp_path / "run"
    args = tiny_binarized_run(
        data, out, "--steps-per-epoch", "8", "--bleu-sentences", "0", max_length=16
    )
    train.main([*args, "--steps", "12", "--steps-per-execution", "4", "--checkpoint-every", "4"])
    err = capsys.readouterr().err
    assert "4 steps per execution" in err and "training stopped at step 12" in err
    steps = [checkpoints.step_of(p) for p in checkpoints.list_checkpoints(out / "checkpoints")]
    assert steps == [4, 8, 12]
    # under TensorFlow the run ends as from text: the test split's text scored, then exported
    assert (out / "translations.test.txt").is_file() and (out / "export" / "1").is_dir()
    with pytest.raises(SystemExit):
        train.main(
            [*args, "--steps", "24", "--steps-per-execution", "8", "--checkpoint-every", "8"]
        )
    assert (
        f"--steps-per-execution 8: the backup in {out / 'backup'} holds step 12, not a multiple "
        "of 8" in capsys.readouterr().err
    )
    assert json.loads((out / "run.json").read_text())["steps"] == 12


@pytest.mark.slow
def test_a_jax_run_without_tensorflow_trains_resumes_and_tensorflow_scores_it(
    data, tensorflow_free, tmp_path, capsys
):
    """The GPU machine's case, on two CPU devices: a venv made with the TensorFlow-free install
    (`pip install "keras-transformer[jax]"`), where tensorflow cannot be imported and the
    library's layers can; its `kt-train` shares the batches by keras.distribution.DataParallel,
    trains, writes its checkpoints, backup, summaries and model.keras, and a second command
    resumes it; the commands it prints then score and export model.keras under TensorFlow
    (their installed functions, in this process)."""
    python = tensorflow_free / "python"
    outside = {"program": python, "cwd": tmp_path}
    imported = run_python(
        "-c", LAYERS_WITHOUT_TENSORFLOW, env={"KERAS_BACKEND": "jax", "PYTHONPATH": None}, **outside
    )
    assert imported.stdout.split("\n")[:2] == ["No module named 'tensorflow'", "MultiHeadAttention"]
    out = tmp_path / "run"
    args = tiny_binarized_run(
        data, out, "--steps-per-epoch", "10", "--checkpoint-every", "10", max_length=16
    )
    command = {"program": tensorflow_free / "kt-train", "cwd": tmp_path, "timeout": 600}
    # the resume finds the first run's training steps compiled in JAX's cache
    cache = {
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.2",
    }
    env = {**JAX_ON_TWO_CPUS, **cache, "PYTHONPATH": None}
    first = run_python(*args, "--steps", "10", env=env, **command)
    assert "Keras backend jax, DataParallel over 2 devices, 2 steps per execution" in first.stderr
    assert "training is followed by the validation loss only" in first.stderr
    assert (out / "model.keras").is_file() and (out / "logs" / "validation").is_dir()
    resumed = run_python(*args, "--steps", "30", env=env, **command)
    assert f"resumed from the backup in {out / 'backup'} at step 10" in resumed.stderr
    assert "training stopped at step 30" in resumed.stderr
    losses = [float(x) for x in re.findall(r"val_loss: ([0-9.]+)", resumed.stdout)]
    assert len(losses) == 2 and losses[-1] < losses[0]

    printed = [  # the installed commands, run in this process, where TensorFlow is
        shlex.split(line) for line in resumed.stdout.splitlines() if line.strip().startswith("kt-")
    ]
    assert [command[0] for command in printed] == ["kt-evaluate", "kt-export"]
    evaluate, export = (installed_command(command[0]) for command in printed)
    assert keras.backend.backend() == "tensorflow"
    capsys.readouterr()
    evaluate([*printed[0][1:], "--beam-size", "1"])
    assert "BLEU = " in capsys.readouterr().out and (out / "translations.test.txt").is_file()
    export(printed[1][1:])
    assert (out / "export" / "1" / "saved_model.pb").is_file()


# Run by the TensorFlow-free venv's python: tensorflow cannot be imported, the layers can.
LAYERS_WITHOUT_TENSORFLOW = """
try:
    import tensorflow
except ImportError as error:
    print(error)
import keras_transformer as kt
print(kt.layers.MultiHeadAttention.__name__)
"""


def installed_command(name):
    """The function the installed command `name` (a console script of this environment) runs."""
    (entry_point,) = importlib.metadata.entry_points(group="console_scripts", name=name)
    return entry_point.load()


DATA_PARALLEL = """
import json, sys
import keras, numpy as np
import keras_transformer as kt
from keras_transformer.data.binarized import Binarized

config = kt.TransformerConfig.preset("tiny", vocab_size=300, dropout=0.0, max_length=64)
inputs, labels, weights = next(Binarized(sys.argv[1]).batches("train", 512, batch_size_multiple=2))
results = []
for distribution in (None, keras.distribution.DataParallel()):
    keras.distribution.set_distribution(distribution)
    keras.utils.set_random_seed(0)
    model = kt.build_transformer(config)
    model.compile(optimizer=keras.optimizers.SGD(1.0), jit_compile=True,
                  loss=kt.LabelSmoothedCrossEntropy(token_weights=True))
    loss = model.train_on_batch(inputs, labels, sample_weight=weights)
    results.append((loss, [keras.ops.convert_to_numpy(w) for w in model.weights]))
(loss_1, weights_1), (loss_2, weights_2) = results
devices = len(keras.distribution.list_devices())
print(json.dumps({"devices": devices, "loss": [float(loss_1), float(loss_2)],
                  "update": max(float(np.abs(a - b).max()) for a, b in zip(weights_1, weights_2))}))
"""


@pytest.mark.slow
def test_data_parallel_over_two_devices_makes_the_update_of_one(data):
    """One SGD step (learning rate 1: the update is the gradient) on the same global batch. Two
    devices each take half the rows and all-reduce their gradients: a sum in another order, so
    float32 rounding alone may differ, a few ulps of gradients of magnitude <= 1 (measured:
    1.2e-7, one float32 ulp at 1)."""
    completed = run_python("-c", DATA_PARALLEL, str(data), env=JAX_ON_TWO_CPUS, timeout=300)
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["devices"] == 2
    np.testing.assert_allclose(result["loss"][1], result["loss"][0], rtol=1e-6)
    assert result["update"] < 1e-6, result


def test_a_tf_distribute_strategy_under_jax_is_refused(monkeypatch):
    import keras

    from training import runtime

    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    for name in ("mirrored", "multi_worker", "tpu"):
        with pytest.raises(ValueError, match=f"--strategy {name} is a tf.distribute strategy"):
            runtime.create_strategy(name)
    with pytest.raises(ValueError, match="set XLA_FLAGS=--xla_force_host_platform_device_count"):
        runtime.create_strategy("auto", cpu_devices=2)
    monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "host1:1234,host2:1234")
    with pytest.raises(ValueError, match="KERAS_DISTRIBUTION_NUM_PROCESSES, KERAS_DISTRIB"):
        runtime.create_strategy("auto")


@pytest.mark.slow
def test_the_gpu_benchmark_runs_without_tensorflow_at_a_tiny_size(data, tmp_path):
    """`python -m benchmarks.gpu --quick` on a CPU, tensorflow unimportable in it and in the
    processes it starts: every part measured, GPU.md and GPU.json written, and the demo run's
    model.keras among its results."""
    out = tmp_path / "gpu"
    completed = run_python(
        "-m", "benchmarks.gpu", "--quick", "--data", data, "--output-dir", out,
        "--demo-minutes", "0.1", env={"KERAS_BACKEND": "jax", **WITHOUT_TENSORFLOW}, timeout=600,
    )  # fmt: skip
    assert "tensorflow imported: False" in completed.stderr
    results = json.loads((out / "GPU.json").read_text())
    assert set(results) >= {"matmul", "models", "host", "demo"}
    assert results["models"]["tiny"]["ours"]["target_tokens_per_second"] > 0
    # at the tiny setting every batch is padded to 8 tokens: one shape, compiled in a slow step
    assert results["host"]["compiles"]["shapes"] == 1 <= results["host"]["compiles"]["slow_steps"]
    assert pathlib.Path(results["demo"]["model"]).is_file() and results["demo"]["steps"] > 0
    report = (out / "GPU.md").read_text()
    assert "| tiny | ours / peer |" in report and "## The demo's model" in report


def test_the_gpu_benchmarks_models_that_share_a_failed_process_each_have_its_error(monkeypatch):
    """--quick measures the models in one probe process: when it fails, each model's row is its
    error, and no ratio is made of them."""
    from benchmarks import gpu

    def failing(kind, *arguments, timeout=900):
        assert kind == "several" and len(json.loads(arguments[0])) == 2
        raise RuntimeError("probe several failed: out of\nmemory")

    monkeypatch.setattr(gpu, "probe", failing)
    rows = gpu.model_rows("tiny", gpu.PEERS, "float32", quick=True, rate=1e12)
    error = {"error": "probe several failed: out of memory"}
    assert rows == {"tiny": {name: error for name in gpu.PEERS}}
