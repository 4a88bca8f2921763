"""`python -m training.train`: a short run end to end, resuming after SIGKILL, tf.distribute
(MirroredStrategy on two logical CPUs; two processes are tests/test_two_processes.py's), mixed
precision, and bad input that is refused before anything is written."""

import glob
import json
import os
import pathlib
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
from conftest import JAX_CPU, number_pairs, run_python, tiny_flags, write_number_data
from tensorboard.backend.event_processing import event_accumulator

from training import train

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def number_data(tmp_path_factory):
    """tsv:DIR data: German number words to English ones."""
    return write_number_data(tmp_path_factory.mktemp("numbers"))


def tiny_run(data, out_dir, *extra):
    return [
        *tiny_flags(data),
        "--bleu-sentences",
        "6",
        "--samples",
        "2",
        "--beam-size",
        "1",
        "--run-dir",
        str(out_dir),
        *extra,
    ]


def run_program(args, env=None, timeout=300):
    return run_python("-m", "training.train", *args, env=env, timeout=timeout)


def without_scoring_and_export(monkeypatch):
    """The runs of the test end with their averaged model.keras and run.json's record, without
    the test split's translation and the SavedModel export (`finish.score_and_export`): for
    tests of training and resuming, whose finish other tests check."""
    from training import finish

    monkeypatch.setattr(finish, "score_and_export", lambda context, model: {})


def summaries(log_dir):
    """{tag: (plugin name, [(step, value)])} of every event file under log_dir."""
    found = {}
    for path in sorted(glob.glob(f"{log_dir}/events.out.tfevents.*")):
        accumulator = event_accumulator.EventAccumulator(
            path, size_guidance={event_accumulator.TENSORS: 0}
        )
        accumulator.Reload()
        for tag in accumulator.Tags()["tensors"]:
            plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
            events = [(e.step, e.tensor_proto) for e in accumulator.Tensors(tag)]
            found.setdefault(tag, (plugin, []))[1].extend(events)
    return found


def scalar_values(events):
    import tensorflow as tf

    return [(step, float(tf.make_ndarray(proto))) for step, proto in events]


def tree(directory):
    """Every file under `directory` with its bytes, to prove that nothing changed."""
    return {p: p.read_bytes() for p in pathlib.Path(directory).rglob("*") if p.is_file()}


@pytest.mark.slow
def test_short_run_writes_summaries_checkpoints_and_export(number_data, tmp_path, capsys):
    out = tmp_path / "run"
    train.main(
        tiny_run(
            number_data, out, "--steps", "40", "--steps-per-epoch", "20", "--keep-checkpoints", "2"
        )
    )
    printed = capsys.readouterr().out

    train_logs, validation_logs = (
        summaries(out / "logs" / "train"),
        summaries(out / "logs" / "validation"),
    )
    for tag in ("epoch_loss", "batch_loss", "epoch_learning_rate", "epoch_accuracy"):
        assert train_logs[tag][0] == "scalars", tag
    rates = dict(scalar_values(train_logs["epoch_learning_rate"][1]))
    assert rates[1] == pytest.approx(64**-0.5 * 41 * 1000**-1.5, rel=1e-5)  # Eq. 3 after 40 updates
    for tag in ("bleu", "chrf"):
        plugin, values = validation_logs[tag]
        assert plugin == "scalars" and [step for step, _ in values] == [20, 40]
        assert all(0 <= value <= 100 for _, value in scalar_values(values)), tag
    assert validation_logs["translations"][0] == "text"
    assert (
        validation_logs["attention/0"][0] == "images"
        and validation_logs["attention/1"][0] == "images"
    )
    assert validation_logs["attention_pieces/0"][0] == "text"

    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "step-0000020.weights.npz",
        "step-0000040.weights.npz",
    ]
    assert (out / "model.keras").is_file() and (out / "backup" / "backup.json").is_file()
    assert len((out / "translations.test.txt").read_text().splitlines()) == 12
    report = json.loads((out / "translations.test.txt.scores.json").read_text())
    for name in ("bleu", "chrf", "chrf++"):
        assert f"{report[name + '_text']}    ({report[name + '_signature']})" in printed
    assert (
        "nrefs:1|case:mixed|eff:no|tok:13a" in printed and "nc:6|nw:2" in printed
    )  # BLEU 13a; chrF++
    assert (out / "export" / "1" / "saved_model.pb").is_file()
    finished = json.loads((out / "run.json").read_text())
    assert finished["config"]["vocab_size"] == 300
    assert finished["finished"]["exported"] == "the average of the checkpoints of steps 20, 40"

    # The same command again finds the run finished: it trains nothing, exports no second
    # version and changes no file.
    before = tree(out)
    train.main(
        tiny_run(
            number_data, out, "--steps", "40", "--steps-per-epoch", "20", "--keep-checkpoints", "2"
        )
    )
    printed = capsys.readouterr()
    assert f"the run in {out} is finished at step 40" in printed.out
    assert "training stopped" not in printed.err
    assert tree(out) == before

    # Bad input against this run is refused, naming the flag, and nothing in it changes.
    for extra, message in [
        (["--vocab-size", "350"], "mismatch: .*--tokenizer/--subword-model: 300 in the "),
        (
            ["--tokenizer", str(out / "tokenizer.model")],
            "vocabulary mismatch: .*--tokenizer/--subword-model: None in the run, '",
        ),
        (
            ["--set", "d_model=32", "--set", "num_heads=2"],
            r"other settings .*--set d_model: 64 in the run, 32 now; --set num_heads: 4 in "
            r"the run, 2 now",
        ),
        (["--max-length", "24"], "--max-length: 32 in the run, 24 now"),
        (["--seed", "1"], "--seed: 0 in the run, 1 now"),
        (["--subword-sampling", "0.1"], "--subword-sampling: 0.0 in the run, 0.1 now"),
        (["--preset", "small"], "--preset: 'tiny' in the run, 'small' now"),
        (["--mixed-precision", "bf16"], "--mixed-precision: 'float32' in the run, 'mixed_bfloat16"),
        (["--steps-per-epoch", "10"], "--steps-per-epoch: 20 in the run, 10 now"),
        (["--steps", "30"], "--steps 30: the run in .* has trained 40 steps already"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            train.main(
                tiny_run(number_data, out, "--steps", "40", "--steps-per-epoch", "20", *extra)
            )
        assert exit_info.value.code == 1
        assert re.search(message, capsys.readouterr().err), extra
    assert tree(out) == before

    # A larger --steps trains on from the backup to exactly that step (a partial epoch), which
    # is backed up too, and exports a second version.
    longer = tiny_run(number_data, out, "--steps", "45", "--steps-per-epoch", "20")
    train.main([*longer, "--keep-checkpoints", "2"])
    printed = capsys.readouterr()
    assert f"resumed from the backup in {out / 'backup'} at step 40" in printed.err
    assert "training stopped at step 45" in printed.err
    assert json.loads((out / "backup" / "backup.json").read_text())["step"] == 45
    assert checkpoints_steps(out) == [40, 45]
    assert sorted(p.name for p in (out / "export").iterdir()) == ["1", "2"]
    assert json.loads((out / "run.json").read_text())["finished"]["step"] == 45

    # Checkpoints without the backup: refused, never a silent restart that deletes them.
    (out / "backup" / "backup.json").unlink()
    before = tree(out)
    with pytest.raises(SystemExit):
        train.main(tiny_run(number_data, out, "--steps", "50", "--steps-per-epoch", "20"))
    assert (
        f"{out / 'checkpoints'} holds checkpoints up to step 45 but "
        f"{out / 'backup' / 'backup.json'} is missing" in capsys.readouterr().err
    )
    assert tree(out) == before


@pytest.mark.slow
def test_trained_under_jax_from_text_data(number_data, tmp_path):
    """Text data under KERAS_BACKEND=jax, where TensorFlow is installed: the tf.data pipeline
    feeds the XLA step with static shapes, the step and epoch summaries are written, and the
    program prints the commands that score and export model.keras under TensorFlow (which
    tests/test_binarized.py runs after a run without TensorFlow)."""
    out = tmp_path / "run"
    steps = ["--steps", "40", "--steps-per-epoch", "20", "--checkpoint-every", "10"]
    trained = run_program(tiny_run(number_data, out, *steps), env=JAX_CPU)
    assert "Keras backend jax" in trained.stderr and "XLA on" in trained.stderr
    assert "2 steps per execution" in trained.stderr  # the largest of 16, 8, 4, 2 dividing 10
    assert "--bleu-sentences: translating needs the TensorFlow backend" in trained.stderr
    printed = [line.strip() for line in trained.stdout.splitlines() if "python -m" in line]
    assert [shlex.split(line)[2] for line in printed] == ["training.evaluate", "serving.export"]
    assert not (out / "export").exists() and (out / "model.keras").is_file()
    assert [step for step, _ in summaries(out / "logs" / "train")["batch_loss"][1]][-1] == 40
    losses = [
        value for _, value in scalar_values(summaries(out / "logs" / "train")["epoch_loss"][1])
    ]
    assert losses[-1] < losses[0]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_subword_sampling_trains_and_the_export_never_samples(
    number_data, tmp_path, capsys, monkeypatch, model
):
    """--subword-sampling (BPE-dropout, or a unigram vocabulary's sampling, on the training
    pairs) is recorded in run.json, a resume must agree with it, and the exported graph segments
    deterministically: the same sentences give the same translations and scores, call after
    call. --subword-model is recorded with the vocabulary (BPE, the default, by omission)."""
    import tensorflow as tf

    from keras_transformer.tokenizer import SubwordTokenizer

    drawn = []
    sampling = SubwordTokenizer.sampling
    monkeypatch.setattr(
        SubwordTokenizer, "sampling", lambda self, p: drawn.append(p) or sampling(self, p)
    )
    out = tmp_path / "run"
    args = tiny_run(number_data, out, "--steps", "4", "--steps-per-epoch", "2")
    args += ["--subword-model", model] if model != "bpe" else []  # bpe: the default
    train.main([*args, "--subword-sampling", "0.2", "--bleu-sentences", "0"])
    assert drawn == [0.2]  # the training batches, and nothing else, sample
    settings = json.loads((out / "run.json").read_text())
    assert settings["subword_sampling"] == 0.2
    assert settings["vocabulary"] == {
        "vocab_size": 300,
        **({"model": model} if model != "bpe" else {}),
    }
    assert SubwordTokenizer.load(out / "tokenizer.model").model_type == model
    translate = tf.saved_model.load(str(out / "export" / "1")).signatures["serving_default"]
    sentences = tf.constant([de for de, _ in number_pairs(8, 5)])
    first = translate(sentences=sentences)
    for _ in range(3):
        again = translate(sentences=sentences)
        assert again["translation"].numpy().tolist() == first["translation"].numpy().tolist()
        np.testing.assert_array_equal(again["score"].numpy(), first["score"].numpy())
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        train.main([*args, "--bleu-sentences", "0"])
    assert exit_info.value.code == 1
    assert "--subword-sampling: 0.2 in the run, 0.0 now" in capsys.readouterr().err
    if model != "bpe":  # the vocabulary's kind is the run's
        bpe = tiny_run(number_data, out, "--steps", "4", "--steps-per-epoch", "2")
        with pytest.raises(SystemExit) as exit_info:
            train.main([*bpe, "--subword-sampling", "0.2", "--bleu-sentences", "0"])
        assert exit_info.value.code == 1
        assert "--vocab-size/--tokenizer/--subword-model" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--preset", "huge"], "unknown preset 'huge'; choose one of"),
        (["--strategy", "gpus"], "unknown strategy 'gpus'; choose one of auto, default, mirrored"),
        (["--mixed-precision", "fp8"], "unknown mixed precision 'fp8'"),
        (["--set", "depth=3"], "unknown config field(s) ['depth']"),
        (
            ["--dataset", "tfds:no_such_dataset/de-en"],
            "tensorflow-datasets has no dataset 'no_such",
        ),
        (["--dataset", "csv:somewhere"], "expected ding, tfds:NAME, folder:DIR, tsv:DIR or bin"),
        (
            ["--strategy", "multi_worker"],
            "reads the cluster from the TF_CONFIG environment variable",
        ),
        (["--steps-per-execution", "3"], "--steps-per-epoch 1000 is not a multiple of --steps-p"),
        (
            ["--accumulate-steps", "32"],
            "--tokens-per-batch 512 cannot hold one pair of --max-length 32 tokens for each of 1 "
            "replica(s) x --accumulate-steps 32: give at least 1024",
        ),
        (["--tokenizer", "/no/such.model"], "--tokenizer /no/such.model: no such file"),
        (["--tokenizer", str(ROOT / "README.md")], "README.md: not a sentencepiece model"),
        (["--phrases"], "--phrases adds the Ding dictionary's phrase pairs; --dataset 'tsv:"),
        (["--sentence-repeats", "4"], "--sentence-repeats up-samples the sentences among the"),
        (["--tag-phrases"], "--tag-phrases tags the phrase pairs: it needs --phrases"),
        (["--sentence-alternatives"], "--sentence-alternatives adds sentence pairs to the phrase"),
        (
            ["--max-length", "2"],
            "leaves no pair to train on: pairs read 2000, kept 0, dropped 2000",
        ),
        (["--subword-sampling", "0.1", "--deterministic"], "--deterministic cannot repeat"),
        (
            ["--subword-model", "unigram", "--dataset", "binarized:somewhere"],
            "binarized data and --init-from's model bring their own: leave --subword-model",
        ),
        (
            ["--subword-model", "unigram", "--tokenizer", str(ROOT / "Makefile")],
            "--subword-model chooses the vocabulary the run trains; --tokenizer, binarized",
        ),
        (
            ["--subword-sampling", "0.1", "--dataset", "binarized:somewhere"],
            "binarized data holds one segmentation",
        ),
        (["--test-split", "exam"], "--test-split exam: tsv:"),
        (
            ["--set", "vocab_size=300"],
            "--set vocab_size=300: the model's vocab_size is its "
            "vocabulary's size; give --vocab-size 300",
        ),
        (
            ["--set", "tokens_per_batch=64"],
            "--set tokens_per_batch=64 and --tokens-per-batch 512 "
            "disagree: give --tokens-per-batch alone",
        ),
        (["--validation-split", "dev"], "--validation-split dev: tsv:"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    number_data, tmp_path, capsys, monkeypatch, extra, message
):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        train.main(tiny_run(number_data, out, "--steps", "2") + extra)
    assert exit_info.value.code == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_second_run_on_one_directory_is_refused_at_once(number_data, tmp_path, capsys):
    """A run holds an exclusive lock on its directory; the OS releases it when the process
    dies."""
    from keras_transformer_cli.run_dir import RunError, RunLock

    out = tmp_path / "run"
    with RunLock(out):
        with pytest.raises(SystemExit) as exit_info:
            train.main(tiny_run(number_data, out, "--steps", "2"))
        assert exit_info.value.code == 1
        assert f"another process is training in {out}" in capsys.readouterr().err
        assert not any(out.iterdir())
    assert not out.exists()  # the lock made the directory, and nothing was written into it
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)], cwd=ROOT, stdout=subprocess.PIPE
    )
    assert holder.stdout.readline() == b"locked\n"
    with pytest.raises(RunError, match="another process is training"):
        RunLock(out)
    holder.kill()
    holder.wait()
    RunLock(out).release()
    RunLock(tmp_path / "new" / "runs" / "a").release()  # the directories made for it, removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


HOLD_LOCK = """
import sys, time
from keras_transformer_cli.run_dir import RunLock
lock = RunLock(sys.argv[1])
print("locked", flush=True)
time.sleep(120)
"""


def test_tokenizer_without_the_special_ids_is_refused_before_anything_is_written(
    number_data, tmp_path, capsys
):
    import sentencepiece

    (tmp_path / "text.txt").write_text(
        "eins zwei drei vier fünf sechs sieben acht neun zehn\n" * 20
    )
    sentencepiece.SentencePieceTrainer.train(
        input=str(tmp_path / "text.txt"),
        model_prefix=str(tmp_path / "plain"),
        vocab_size=25,
        minloglevel=2,
    )
    out = tmp_path / "run"
    with pytest.raises(SystemExit):
        train.main(tiny_run(number_data, out, "--tokenizer", str(tmp_path / "plain.model")))
    assert (
        "plain.model: the sentencepiece model's ids 0-3 are ['<unk>', '<s>', '</s>',"
        in capsys.readouterr().err
    )
    assert not out.exists()


def test_unfetchable_corpus_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(
        "PATH", str(tmp_path / "no-tools")
    )  # no apt-get: the Ding package cannot be fetched
    out = tmp_path / "run"
    with pytest.raises(SystemExit):
        train.main(
            ["--preset", "tiny", "--data-dir", str(tmp_path / "cache"), "--run-dir", str(out)]
        )
    assert (
        "cannot run apt-get: not found; fetching trans-de-en needs Debian's apt-get"
        in capsys.readouterr().err
    )
    assert not out.exists()


def test_checkpoints_of_another_program_are_not_touched(number_data, tmp_path, capsys):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "model.ckpt-1000.index").write_text("someone else's")
    with pytest.raises(SystemExit):
        train.main(tiny_run(number_data, out, "--steps", "2"))
    assert "holds checkpoints/ but no run.json" in capsys.readouterr().err
    assert [p.name for p in out.rglob("*")] == ["checkpoints", "model.ckpt-1000.index"]


@pytest.mark.slow
def test_mixed_bfloat16_trains_without_nan(number_data, tmp_path, capsys):
    out = tmp_path / "run"
    train.main(
        tiny_run(
            number_data,
            out,
            "--steps",
            "12",
            "--steps-per-epoch",
            "6",
            "--mixed-precision",
            "bf16",
            "--bleu-sentences",
            "0",
        )
    )
    assert "dtype policy mixed_bfloat16" in capsys.readouterr().err
    losses = [
        value for _, value in scalar_values(summaries(out / "logs" / "train")["batch_loss"][1])
    ]
    assert len(losses) == 12 and all(np.isfinite(losses)) and losses[-1] < losses[0]
    # The model keeps its policy (model.keras's config names it), and its export translates the
    # test split exactly as the run's own translation of the same model did.
    from keras_transformer_cli.translators import translator_for
    from training import metrics

    with zipfile.ZipFile(out / "model.keras") as saved:
        assert "mixed_bfloat16" in saved.read("config.json").decode()

    sources = [line.split("\t")[0] for line in (number_data / "test.tsv").read_text().splitlines()]
    served = metrics.translate_all(translator_for(out / "export", beam_size=1).translate, sources)
    assert served == (out / "translations.test.txt").read_text().splitlines()


@pytest.mark.slow
def test_killed_run_resumes_from_its_backup(number_data, tmp_path, capsys, monkeypatch):
    """With gradient accumulation: steps, epochs and checkpoints count updates, also after the
    resume (here, in the test's process, without the test split's scoring and the export)."""
    without_scoring_and_export(monkeypatch)
    out = tmp_path / "run"
    args = tiny_run(
        number_data,
        out,
        "--steps",
        "75",
        "--steps-per-epoch",
        "15",
        "--bleu-sentences",
        "0",
        "--accumulate-steps",
        "2",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "training.train", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    metadata = out / "backup" / "backup.json"
    deadline = time.monotonic() + 240
    while not (metadata.is_file() and json.loads(metadata.read_text())["step"] >= 30):
        assert process.poll() is None and time.monotonic() < deadline, (
            "the run ended before its second backup"
        )
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    backed_up = json.loads(metadata.read_text())["step"]
    assert backed_up < 75, "the run finished before it was killed"

    capsys.readouterr()
    train.main(args)
    completed = capsys.readouterr()
    assert f"resumed from the backup in {out / 'backup'} at step {backed_up}" in completed.err
    # only the missing epochs are trained
    assert completed.out.count("/15 - ") == (75 - backed_up) // 15
    assert "training stopped at step 75" in completed.err
    assert checkpoints_steps(out) == [15, 30, 45, 60, 75]


@pytest.mark.slow
def test_sigterm_backs_up_the_step_and_the_run_resumes_there(
    number_data, tmp_path, capsys, monkeypatch
):
    """SIGTERM (a cluster's or a preemptible machine's warning): the step in progress finishes,
    the backup holds exactly that step's weights (equal to its step checkpoint), the program
    says so and exits with 143 without exporting; the same command resumes at that step (here,
    in the test's process, whose other tests keep TensorFlow's op determinism off, and without
    the test split's scoring and the export)."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer_cli import checkpoints, run_dir
    from keras_transformer_cli.checkpoints import Backup

    out = tmp_path / "run"
    args = tiny_run(number_data, out, "--steps", "60", "--steps-per-epoch", "20")
    args += ["--checkpoint-every", "1", "--keep-checkpoints", "3", "--bleu-sentences", "0"]
    args += ["--deterministic"]
    process = subprocess.Popen(
        [sys.executable, "-m", "training.train", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not any(checkpoints_steps(out)[-1:]) or checkpoints_steps(out)[-1] < 3:
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=120)[1]
    step = checkpoints.saved_step(out / "backup")
    assert process.returncode == 143 and 3 <= step < 60, stderr[-3000:]
    assert f"stopped by SIGTERM after step {step}, which the backup in {out / 'backup'}" in stderr
    assert not (out / "export").exists()
    model = run_dir.RunDirectory(out).build_model()
    model.compile(optimizer=kt.create_optimizer(model.config), loss=kt.LabelSmoothedCrossEntropy())
    assert Backup.restore(model, out / "backup") == step
    expected = checkpoints.read_checkpoint(checkpoints.checkpoint_path(out / "checkpoints", step))
    for name, value in checkpoints.weights_of(model).items():
        np.testing.assert_array_equal(value, expected[name], err_msg=name)
    keras.backend.clear_session()

    monkeypatch.setattr(tf.config.experimental, "enable_op_determinism", lambda: None)
    without_scoring_and_export(monkeypatch)
    capsys.readouterr()
    train.main(args)
    resumed = capsys.readouterr().err
    assert f"resumed from the backup in {out / 'backup'} at step {step}" in resumed
    assert "training stopped at step 60" in resumed


@pytest.mark.slow
def test_accumulated_updates_and_checkpoints_every_few_minutes(
    number_data, tmp_path, capsys, monkeypatch
):
    """--accumulate-steps 2: the steps, the learning rate and TensorBoard's axis count updates.
    --checkpoint-minutes 1 alone: a checkpoint whenever a minute passed since the last (the
    clock below advances 10 s at each reading: one at the start, one per step), and one at the
    end (the run ends without the test split's scoring and the export)."""
    from keras_transformer_cli import checkpoints

    without_scoring_and_export(monkeypatch)
    out = tmp_path / "run"
    monkeypatch.setattr(checkpoints, "time", SteppingClock())
    args = ["--steps", "14", "--steps-per-epoch", "7", "--bleu-sentences", "0"]
    args += ["--accumulate-steps", "2", "--checkpoint-minutes", "1", "--keep-checkpoints", "9"]
    train.main(tiny_run(number_data, out, *args))
    printed = capsys.readouterr()
    assert "2 micro-batches per update" in printed.err
    assert printed.out.count("/7 - ") == 2 and "training stopped at step 14" in printed.err
    assert checkpoints_steps(out) == [6, 12, 14]
    train_logs = summaries(out / "logs" / "train")
    assert [step for step, _ in train_logs["batch_loss"][1]] == list(range(1, 15))
    rates = dict(scalar_values(train_logs["epoch_learning_rate"][1]))
    assert rates[1] == pytest.approx(64**-0.5 * 15 * 1000**-1.5, rel=1e-5)  # Eq. 3, update 15


# Two runs in one process (one TensorFlow start), without the final averaging and export: the
# CPU is split into two devices once, before TensorFlow starts, and both runs mirror over them.
TWO_RUNS = """
import json, sys
from training import runtime, train
from training.context import opened
from training.fit import fit
from training.plan import TrainingPlan
devices = runtime.split_cpu(2)
runtime.split_cpu = lambda count: devices[:count]
for argv in json.loads(sys.argv[1]):
    with opened(TrainingPlan.from_flags(train.build_parser().parse_args(argv))) as context:
        fit(context)
"""


@pytest.mark.slow
def test_deterministic_runs_are_bitwise_identical(number_data, tmp_path, monkeypatch):
    """--deterministic turns TensorFlow's op determinism on; with it, dropout, two replicas and
    accumulation, two runs give the same losses and the same weights, bit for bit (on this CPU
    runs without it may agree too: the flag matters where kernels are not deterministic)."""
    import tensorflow as tf

    calls = []
    monkeypatch.setattr(tf.config.experimental, "enable_op_determinism", lambda: calls.append(1))
    from training.context import opened
    from training.plan import TrainingPlan

    args = tiny_run(number_data, tmp_path / "setup", "--deterministic")
    with opened(TrainingPlan.from_flags(train.build_parser().parse_args(args))):
        assert calls == [1]
    args = ["--steps", "6", "--steps-per-epoch", "3", "--bleu-sentences", "0", "--deterministic"]
    args += ["--accumulate-steps", "2", "--strategy", "mirrored", "--cpu-devices", "2"]
    runs = [tiny_run(number_data, tmp_path / name, *args) for name in ("first", "second")]
    completed = run_python("-c", TWO_RUNS, json.dumps(runs), timeout=600)
    assert completed.stderr.count("MirroredStrategy with 2 replica(s)") == 2
    assert completed.stderr.count("deterministic ops") == 2
    results = []
    for name in ("first", "second"):
        losses = summaries(tmp_path / name / "logs" / "train")["batch_loss"][1]
        checkpoints = sorted((tmp_path / name / "checkpoints").iterdir())
        results.append(
            (
                [proto.SerializeToString() for _, proto in losses],
                [path.read_bytes() for path in checkpoints],
            )
        )
    assert len(results[0][0]) == 6 and len(results[0][1]) == 2
    assert results[0] == results[1]


class SteppingClock:
    """A stand-in for the time module whose monotonic clock advances 10 s at every reading."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        self.now += 10.0
        return self.now


@pytest.mark.slow
def test_run_cut_by_max_minutes_is_backed_up_and_trains_on_from_that_step(
    number_data, tmp_path, capsys, monkeypatch
):
    """--max-minutes stops the run inside its second epoch: the backup holds that very step
    (the partial epoch is backed up like any other), and the same command again trains on from
    it, keeps the cut run's checkpoints and ends at --steps exactly (here without the test
    split's scoring and the export, whose second version the short run's test checks)."""
    from keras_transformer_cli import checkpoints
    from keras_transformer_cli.checkpoints import checkpoint_path
    from training import callbacks

    out = tmp_path / "run"
    args = tiny_run(
        number_data,
        out,
        "--steps",
        "60",
        "--steps-per-epoch",
        "20",
        "--checkpoint-every",
        "10",
        "--keep-checkpoints",
        "5",
        "--bleu-sentences",
        "0",
        "--max-minutes",
        "5",
    )
    without_scoring_and_export(monkeypatch)
    monkeypatch.setattr(callbacks, "time", SteppingClock())  # 300 s pass at the 31st step's check
    train.main(args)
    printed = capsys.readouterr()
    assert (
        "the time limit of 5 minutes is reached" in printed.out
        and "training stopped at step 31" in printed.err
    )
    assert checkpoints.saved_step(out / "backup") == 31
    assert checkpoints_steps(out) == [10, 20, 30, 31]
    cut = checkpoint_path(out / "checkpoints", 30).read_bytes()

    monkeypatch.undo()  # the real clock: 5 minutes are plenty for the 29 steps left
    without_scoring_and_export(monkeypatch)
    backed_up, save = [], checkpoints.Backup.save
    monkeypatch.setattr(
        checkpoints.Backup,
        "save",
        lambda self: backed_up.append(checkpoints.current_step(self.model)) or save(self),
    )
    train.main(args)
    printed = capsys.readouterr()
    assert f"resumed from the backup in {out / 'backup'} at step 31" in printed.err
    assert "epoch 2 resumes at step 31: 9 steps to its end, then whole epochs" in printed.err
    assert "9/9 - " in printed.out  # the progress bar of that epoch's rest
    assert backed_up == [40, 60]  # the plan's epoch ends, not 51 and 60
    assert "training stopped at step 60" in printed.err
    assert checkpoints_steps(out) == [30, 31, 40, 50, 60]
    assert checkpoint_path(out / "checkpoints", 30).read_bytes() == cut  # not trained again


def checkpoints_steps(out):
    from keras_transformer_cli.checkpoints import list_checkpoints, step_of

    return [step_of(p) for p in list_checkpoints(out / "checkpoints")]


@pytest.fixture(scope="module")
def letters_data(tmp_path_factory):
    """Sentences of exactly six one-letter words: with a 300-piece vocabulary every pair is 7
    tokens long with eos, so one bucket batches 512 // 7 = 73 pairs... rounded to an even 72
    by --tokens-per-batch 504, the same batch for one replica and for two."""
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("letters")
    for split, n in (("train", 400), ("validation", 4), ("test", 4)):
        lines = []
        for _ in range(n):
            words = rng.choice(list("abcdefgh"), 6)
            lines.append(" ".join(words) + "\t" + " ".join(words[::-1]) + "\n")
        (root / f"{split}.tsv").write_text("".join(lines))
    return root


def letters_run(data, out, *extra):
    """The flags of a 3-step run on the letters data, without dropout."""
    return [
        "--preset",
        "tiny",
        "--set",
        "dropout=0.0",
        "--dataset",
        f"tsv:{data}",
        "--vocab-size",
        "300",
        "--tokens-per-batch",
        "504",
        "--max-length",
        "16",
        "--steps",
        "3",
        "--steps-per-epoch",
        "3",
        "--bleu-sentences",
        "0",
        "--beam-size",
        "1",
        "--run-dir",
        str(out),
        *extra,
    ]


def first_losses(out):
    """The logged loss of the 3-step run in `out`'s steps 1-3 (Keras logs the running mean over
    the epoch)."""
    losses = scalar_values(summaries(out / "logs" / "train")["batch_loss"][1])
    assert [step for step, _ in losses] == [1, 2, 3] and all(np.isfinite([v for _, v in losses]))
    return [value for _, value in losses]


# `python -m training.train ARGS` in a fresh process, whose run ends without the test split's
# scoring and the export: `finish.score_and_export` is replaced once the program has started its
# console, where it imports TensorFlow.
TRAIN_WITHOUT_SCORING = """
import sys
from keras_transformer_cli import console
from training import train
start = console.start
def start_without_scoring(verbose=False):
    start(verbose)
    from training import finish
    finish.score_and_export = lambda context, model: {}
console.start = start_without_scoring
train.main(sys.argv[1:])
"""


@pytest.mark.slow
def test_mirrored_strategy_on_two_cpus_matches_the_default_strategy(
    letters_data, tmp_path, monkeypatch
):
    """The same losses over three steps, so the replicas' gradients are combined into the same
    updates (the default strategy's run in the test's process, the mirrored one in a fresh
    process that splits its CPU; both without the test split's scoring and the export). With
    --tokenizer too: reading its vocabulary size must not start TensorFlow before the CPU is
    split into two devices."""
    without_scoring_and_export(monkeypatch)
    train.main(letters_run(letters_data, tmp_path / "default", "--strategy", "default"))
    default = first_losses(tmp_path / "default")
    mirrored_args = letters_run(
        letters_data,
        tmp_path / "mirrored",
        "--strategy",
        "mirrored",
        "--cpu-devices",
        "2",
        "--tokenizer",
        str(tmp_path / "default" / "tokenizer.model"),
    )
    run_python("-c", TRAIN_WITHOUT_SCORING, *mirrored_args)
    mirrored = first_losses(tmp_path / "mirrored")
    assert mirrored == pytest.approx(default, rel=1e-4)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_workers(args, timeout):
    """Runs the program as workers 0 and 1 of a cluster on 127.0.0.1; returns
    [(process, stdout, stderr)]."""
    cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "training.train", "--strategy", "multi_worker", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "TF_CONFIG": json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": i}}
                ),
            },
        )
        for i in range(2)
    ]
    return [(worker, *worker.communicate(timeout=timeout)) for worker in workers]


def test_workers_stop_together_when_the_chief_cannot_write_the_tokenizer(tmp_path):
    """Only the chief reads the training split for the vocabulary: its error reaches worker 1
    through the barrier, instead of leaving it waiting."""
    for split, text in (
        ("train", "eins\tone\nzwei two\n"),
        ("validation", "eins\tone\n"),
        ("test", "eins\tone\n"),
    ):
        (tmp_path / f"{split}.tsv").write_text(text)
    (chief, _, chief_err), (worker, _, worker_err) = run_two_workers(
        tiny_run(tmp_path, tmp_path / "run", "--steps", "2"), 120
    )
    assert chief.returncode == 1 and "train.tsv:2: expected 'source<TAB>target'" in chief_err, (
        chief_err[-2000:]
    )
    assert (
        worker.returncode == 1
        and f"the chief could not write {tmp_path / 'run' / 'tokenizer.model'}" in worker_err
    ), worker_err[-2000:]
