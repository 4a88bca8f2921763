"""`python -m training.train --init-from MODEL.keras` (fine-tuning), `--keep-best`,
`--early-stopping` and `--final-model`: a fine-tuned model is better on the new data than the
model it started from and than a fresh one trained as long; the best checkpoint is kept apart,
survives rotation, is exported when asked; early stopping ends the run, and its state survives a
resume; bad flags are refused with one line."""

import dataclasses
import json
import re

import numpy as np
import pytest
from conftest import ENGLISH_NUMBERS, GERMAN_NUMBERS

from keras_transformer.digests import sha256_of
from keras_transformer_cli import checkpoints
from keras_transformer_cli.checkpoints import current_step
from keras_transformer_cli.run_dir import load_model
from training import summary, train, validation
from training.context import opened
from training.finish import average_description
from training.fit import fit
from training.plan import TrainingPlan

NUMBERS = (GERMAN_NUMBERS, ENGLISH_NUMBERS)


def task_b_pairs(n, seed):
    """Task B: task A's translation (number words, German to English; 2 to 6 words) on longer
    sentences, 7 to 10 words: a new domain where what the model knows serves. (Where the new
    targets contradict its confident guesses, e.g. "three and one" for "drei eins", a fresh
    model learned faster in 40 steps.)"""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        digits = rng.integers(0, 10, rng.integers(7, 11))
        pairs.append(tuple(" ".join(words[d] for d in digits) for words in NUMBERS))
    return pairs


@pytest.fixture(scope="module")
def task_a_model(number_translator, tmp_path_factory):
    """The model trained on task A (number words, German to English), saved with its tokenizer,
    and tsv:DIR data of task B."""
    model, tokenizer, _ = number_translator
    root = tmp_path_factory.mktemp("finetune")
    (root / "a").mkdir()
    model.save(root / "a" / "model.keras")
    tokenizer.save(root / "a" / "tokenizer.model")
    for split, n, seed in (("train", 2000, 10), ("validation", 40, 11), ("test", 4, 12)):
        lines = "".join(f"{de}\t{en}\n" for de, en in task_b_pairs(n, seed))
        (root / f"{split}.tsv").write_text(lines)
    return root


def flags_for(root, run_dir, *extra):
    return [
        "--dataset",
        f"tsv:{root}",
        "--max-length",
        "32",
        "--tokens-per-batch",
        "512",
        "--beam-size",
        "1",
        "--run-dir",
        str(run_dir),
        *extra,
    ]


def trained(argv):
    """The model of a run trained in this process, without its end (averaging, export), and
    the run's context."""
    with opened(TrainingPlan.from_flags(train.build_parser().parse_args(argv))) as context:
        return fit(context), context


def validation_loss(model, context):
    from keras_transformer.data import Corpus, make_batches
    from training.metrics import validation_loss

    pairs = task_b_pairs(40, 11)
    return validation_loss(model, make_batches(Corpus(pairs).dataset(), context.tokenizer, 512, 32))


@pytest.mark.slow
def test_fine_tuned_model_beats_the_start_and_a_fresh_model_on_new_data(
    task_a_model, number_translator, tmp_path
):
    """20 steps on task B from the task-A model, against the task-A model itself and a fresh
    model of the same config, vocabulary and schedule given the same 20 steps (validation
    losses, nats per token, seeded: 0.53 against 1.41 and 2.85 when written)."""
    root = task_a_model
    steps = ["--steps", "20", "--steps-per-epoch", "20", "--bleu-sentences", "0"]
    tuned, context = trained(
        flags_for(root, tmp_path / "tuned", "--init-from", str(root / "a" / "model.keras"), *steps)
    )
    assert current_step(tuned) == 20
    model_config = number_translator[0].config  # the model's own, and its tokenizer
    tokenizer_sha256 = sha256_of(root / "a" / "tokenizer.model")
    assert context.config == dataclasses.replace(
        model_config, tokens_per_batch=512, tokenizer_sha256=tokenizer_sha256
    )
    fresh, _ = trained(
        flags_for(
            root,
            tmp_path / "fresh",
            *("--preset", "tiny", "--set", "dropout=0.0", "--set", "warmup_steps=100"),
            *("--set", "max_length=32", "--tokenizer", str(root / "a" / "tokenizer.model")),
            *steps,
        )
    )
    losses = {
        name: validation_loss(model, context)
        for name, model in (("start", number_translator[0]), ("tuned", tuned), ("fresh", fresh))
    }
    assert losses["tuned"] < 0.5 * min(losses["start"], losses["fresh"]), losses


SCRIPT = {2: 3.0, 4: 2.0, 6: 2.5, 8: 2.4, 10: 1.0}  # the validation loss at each step


def scripted_figure(context, model):
    """The validation loss of SCRIPT at the model's step (9.0 for the final average)."""
    return SCRIPT[current_step(model)] if model.optimizer else 9.0


@pytest.mark.slow
def test_best_kept_apart_exported_early_stop_and_resume(
    task_a_model, tmp_path, capsys, monkeypatch
):
    """A fine-tuning run with a new vocabulary (--vocab-size, trained on task B), --keep-best
    loss (scripted), --early-stopping 2 and --final-model best. Cut at --steps 6: the best (step
    4) outlives the rotation of step checkpoints and is exported. Run on to --steps 40, with the
    --init-from model gone (the resume reads its own backup): the counter of validations without
    improvement resumes at 1, so the run stops early at step 8 and exports; run again, it is
    finished."""
    monkeypatch.setattr(validation, "figure", scripted_figure)
    root, out = task_a_model, tmp_path / "run"
    model_a = tmp_path / "a" / "model.keras"
    model_a.parent.mkdir()
    for name in ("model.keras", "tokenizer.model"):
        (model_a.parent / name).write_bytes((root / "a" / name).read_bytes())
    argv = flags_for(root, out, "--init-from", str(model_a), "--vocab-size", "330")
    argv += ["--steps-per-epoch", "2", "--keep-checkpoints", "1", "--bleu-sentences", "4"]
    argv += ["--keep-best", "loss", "--early-stopping", "2", "--final-model", "best"]
    train.main([*argv, "--steps", "6"])
    printed = capsys.readouterr()
    assert re.search(
        r"vocabulary update: \d+ of the run's 330 pieces are among the model's", printed.err
    )
    assert sorted(p.name for p in (out / "best").iterdir()) == [
        "best.json",
        "step-0000004.weights.npz",
    ]
    assert [checkpoints.step_of(p) for p in checkpoints.list_checkpoints(out / "checkpoints")] == [
        6
    ]
    assert checkpoints.read_record(out / "best") == {
        "step": 4,
        "metric": "loss",
        "value": 2.0,
        "weights": "step-0000004.weights.npz",
    }
    exported = "the best checkpoint, step 4 (validation loss 2)"
    assert f"{out / 'model.keras'}: {exported}" in printed.out
    kept = checkpoints.read_checkpoint(out / "best" / "step-0000004.weights.npz")
    final = checkpoints.weights_of(load_model(out / "model.keras"))
    for name, value in kept.items():
        np.testing.assert_array_equal(final[name], value, err_msg=name)
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["init_from"] == str(model_a) and recorded["config"]["vocab_size"] == 330
    assert recorded["finished"]["exported"] == exported

    model_a.rename(tmp_path / "gone.keras")
    train.main([*argv, "--steps", "40"])
    printed = capsys.readouterr()
    assert f"resumed from the backup in {out / 'backup'} at step 6" in printed.err
    assert (
        "stopping early at step 8: 2 validations without a better one than the validation loss "
        "2 of step 4" in printed.out
    )
    assert "training stopped at step 8" in printed.err
    assert sorted(p.name for p in (out / "export").iterdir()) == ["1", "2"]
    finished = json.loads((out / "run.json").read_text())["finished"]
    assert finished["step"] == 8 and finished["exported"] == exported
    assert f"  final model:       {exported}" in summary.summary(out, out / "export")

    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    train.main([*argv, "--steps", "40"])
    assert f"the run in {out} is finished at step 8 (stopped early)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        train.main([*argv, "--steps", "40", "--keep-best", "chrf"])
    assert "--keep-best: 'loss' in the run, 'chrf' now" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_best_checkpoint_written_after_the_backup_is_dropped_on_resume(tmp_path):
    """Killed between a better validation's checkpoint and the backup that records it: the
    resumed run keeps the backup's best (best.json names it) and drops the newer one, whose
    epoch it trains and validates again."""
    for step in (4, 8):
        np.savez(checkpoints.checkpoint_path(tmp_path, step), w=np.zeros(1))
    state = checkpoints.BestState("bleu", step=4, value=7.5, since=1)
    checkpoints.KeepBest(tmp_path, state, patience=3).on_train_begin()
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path)] == ["step-0000004.weights.npz"]
    assert checkpoints.read_record(tmp_path)["step"] == 4
    assert checkpoints.BestState.from_dict(state.to_dict(), "bleu") == state
    assert not state.better(7.5) and state.better(7.6) and not state.better(float("nan"))
    assert checkpoints.BestState("loss", 4, 2.0).better(1.9)


def test_a_long_average_is_described_by_its_range():
    """run.json and the summary name a few averaged steps one by one, and many (the demo
    averages 40) by their count and range."""
    assert average_description([25, 50]) == "the average of the checkpoints of steps 25, 50"
    steps = [*range(2900, 3875, 25), 3874]
    assert average_description(steps) == "the average of the 40 checkpoints of steps 2900 to 3874"


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--init-from", "/no/such.keras"], "--init-from /no/such.keras: no such file"),
        (["--init-from", "CORRUPT"], "CORRUPT: not a readable .keras model (BadZipFile"),
        (["--init-from", "ALONE"], "the model's tokenizer is not found (ALONE_DIR/tokenizer"),
        (
            ["--init-from", "A", "--set", "d_model=32", "--set", "num_heads=2"],
            "would change the model's architecture: d_model: 64 in the model, 32 now; num_heads",
        ),
        (["--init-from", "A", "--preset", "tiny"], "max_length: 32 in the model, 512 now"),
        (["--early-stopping", "2"], "--early-stopping needs a validation figure to watch: give"),
        (["--final-model", "best"], "--final-model best needs a validation figure to watch"),
        (["--keep-best", "loss", "--bleu-sentences", "0"], "--bleu-sentences 0 leaves none"),
    ],
)
def test_bad_fine_tuning_and_selection_flags_are_one_line(
    task_a_model, tmp_path, capsys, extra, message
):
    root = task_a_model
    alone = tmp_path / "alone" / "model.keras"
    alone.parent.mkdir()
    alone.write_bytes((root / "a" / "model.keras").read_bytes())
    (tmp_path / "corrupt.keras").write_bytes(b"not a zip file")
    paths = {
        "A": str(root / "a" / "model.keras"),
        "CORRUPT": str(tmp_path / "corrupt.keras"),
        "ALONE": str(alone),
    }
    extra = [paths.get(word, word) for word in extra]
    message = message.replace("ALONE_DIR", str(alone.parent)).replace("CORRUPT", paths["CORRUPT"])
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        train.main(flags_for(root, out, "--steps", "2", *extra))
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_an_unknown_keep_best_figure_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--run-dir", "x", "--keep-best", "bogus"])
    assert exit_info.value.code == 2
    assert "--keep-best: invalid choice: 'bogus'" in capsys.readouterr().err
