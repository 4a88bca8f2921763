"""Step checkpoints and their average (§6.1), the stop on NaN, and `python -m training.evaluate`
against sacrebleu."""

import json
import math
import re

import keras
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data.corpus import read_lines
from keras_transformer_cli import checkpoints, run_dir
from keras_transformer_cli.checkpoints import Backup, StepCheckpoints, TrainingDiverged
from keras_transformer_cli.versions import export_for_serving
from training import average_checkpoints, evaluate
from training.callbacks import StopOnNaN

CONFIG = kt.TransformerConfig.preset("tiny", vocab_size=40, num_layers=1)


def fresh_model(seed):
    keras.utils.set_random_seed(seed)
    return kt.build_transformer(CONFIG)


def test_checkpoint_round_trip_and_mismatch(tmp_path):
    model, other = fresh_model(0), fresh_model(1)
    path = checkpoints.save_checkpoint(model, tmp_path / "step-0000007.weights.npz")
    assert [p.name for p in tmp_path.iterdir()] == [
        "step-0000007.weights.npz"
    ]  # no partial file left
    checkpoints.load_checkpoint(other, path)
    for a, b in zip(model.trainable_variables, other.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    bigger = kt.build_transformer(
        CONFIG.__class__.from_dict({**CONFIG.to_dict(), "vocab_size": 41})
    )
    with pytest.raises(
        ValueError,
        match=r"holds embedding/embeddings with shape \(40, 64\) but the model's is \(41, 64\)",
    ):
        checkpoints.load_checkpoint(bigger, path)
    deeper = kt.build_transformer(CONFIG.__class__.from_dict({**CONFIG.to_dict(), "num_layers": 2}))
    with pytest.raises(ValueError, match=r"does not fit this model: missing \['decoder/layer_1/"):
        checkpoints.load_checkpoint(deeper, path)


def make_run(tmp_path, seeds):
    """A run directory with run.json and one checkpoint per seed (steps 100, 200, ...)."""
    run_dir.RunDirectory(tmp_path).save_settings({"config": CONFIG.to_dict()})
    models = [fresh_model(seed) for seed in seeds]
    for step, model in enumerate(models, start=1):
        checkpoints.save_checkpoint(
            model, checkpoints.checkpoint_path(tmp_path / "checkpoints", step * 100)
        )
    return models


def test_average_equals_the_mean_of_the_weights(tmp_path, capsys):
    models = make_run(tmp_path, seeds=[0, 1, 2, 3])
    average_checkpoints.main(
        ["--run-dir", str(tmp_path), "--last", "3", "--output", str(tmp_path / "avg.keras")]
    )
    assert (
        "averaged 3 checkpoints (step-0000200.weights.npz, step-0000300.weights.npz, "
        "step-0000400.weights.npz)" in capsys.readouterr().out
    )
    averaged = keras.models.load_model(tmp_path / "avg.keras")
    by_path = {v.path: v.numpy() for v in averaged.trainable_variables}
    for variables in zip(*(m.trainable_variables for m in models[1:])):
        expected = np.mean([v.numpy() for v in variables], axis=0)
        np.testing.assert_allclose(by_path[variables[0].path], expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(
        by_path["embedding/embeddings"], models[0].embedding.target_embeddings.numpy()
    )


def test_averaging_refuses_checkpoints_of_different_models(tmp_path, capsys):
    make_run(tmp_path, seeds=[0])
    other = kt.build_transformer(CONFIG.__class__.from_dict({**CONFIG.to_dict(), "d_ff": 32}))
    checkpoints.save_checkpoint(other, checkpoints.checkpoint_path(tmp_path / "checkpoints", 200))
    with pytest.raises(SystemExit):
        average_checkpoints.main(["--run-dir", str(tmp_path)])
    assert (
        "hold different variables; they are not checkpoints of one model" in capsys.readouterr().err
    )
    assert not (tmp_path / "averaged.keras").exists()


def test_step_checkpoints_keep_the_last_k_and_nan_stops_before_saving(tmp_path):
    """Weights poisoned before step 6, a checkpoint step and the last step of epoch 3: its loss
    is NaN, training stops with a message naming the last good checkpoint, before step 6 is
    checkpointed or epoch 3 backed up, so neither holds NaN."""

    class Poison(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 5:
                self.model.embedding.target_embeddings.assign(
                    tf.fill(self.model.embedding.target_embeddings.shape, math.nan)
                )

    model = fresh_model(0)
    model.compile(optimizer=kt.create_optimizer(CONFIG), loss=kt.LabelSmoothedCrossEntropy())
    rng = np.random.default_rng(0)
    x = {
        "source": rng.integers(4, 40, (8, 5)).astype("int32"),
        "target": rng.integers(4, 40, (8, 5)).astype("int32"),
    }
    ckpt_dir, backup_dir = tmp_path / "checkpoints", tmp_path / "backup"
    callbacks = [
        Poison(),
        StopOnNaN(ckpt_dir, backup_dir),
        Backup(str(backup_dir)),
        StepCheckpoints(ckpt_dir, every=2, keep=2),
    ]
    with pytest.raises(
        TrainingDiverged,
        match=r"the loss became nan at step 6; training stopped without saving this "
        r"state. The last good checkpoint is .*step-0000004.weights.npz",
    ):
        model.fit(x, x["target"], batch_size=4, epochs=10, callbacks=callbacks, verbose=0)
    assert [checkpoints.step_of(p) for p in checkpoints.list_checkpoints(ckpt_dir)] == [2, 4]
    for path in checkpoints.list_checkpoints(ckpt_dir):
        assert all(np.isfinite(w).all() for w in checkpoints.read_checkpoint(path).values())
    assert checkpoints.saved_step(backup_dir) == 4  # 2 batches per epoch: epochs 1-2 completed
    restored = fresh_model(5)
    restored.compile(optimizer=kt.create_optimizer(CONFIG), loss=kt.LabelSmoothedCrossEntropy())
    assert Backup.restore(restored, backup_dir) == 4
    assert int(restored.optimizer.iterations.numpy()) == 4
    assert all(np.isfinite(v.numpy()).all() for v in restored.trainable_variables)


def test_weights_made_nan_by_an_update_are_never_saved(tmp_path):
    """The update of step 4 makes a weight NaN while the loss logged for that step is still
    finite (it was computed before the update): the step-4 checkpoint and the epoch-2 backup
    are refused, and the message names step 2's, the last finite checkpoint."""

    class PoisonAfterUpdate(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 4:
                assert math.isfinite(float(logs["loss"]))
                variable = self.model.embedding.target_embeddings
                variable.assign(tf.tensor_scatter_nd_update(variable, [[5]], [[math.nan] * 64]))

    model = fresh_model(0)
    model.compile(optimizer=kt.create_optimizer(CONFIG), loss=kt.LabelSmoothedCrossEntropy())
    rng = np.random.default_rng(0)
    x = {name: rng.integers(4, 40, (8, 5)).astype("int32") for name in ("source", "target")}
    ckpt_dir, backup_dir = tmp_path / "checkpoints", tmp_path / "backup"
    callbacks = [
        StopOnNaN(ckpt_dir, backup_dir),
        PoisonAfterUpdate(),
        StepCheckpoints(ckpt_dir, every=2, keep=5),
        Backup(backup_dir),
    ]
    with pytest.raises(
        TrainingDiverged,
        match=r"NaN or infinite values at step 4 \(embedding/embeddings\), though the loss logged "
        r"was finite; .*step-0000004.weights.npz was not written. The last finite checkpoint is "
        r".*step-0000002.weights.npz",
    ):
        model.fit(x, x["target"], batch_size=4, epochs=10, callbacks=callbacks, verbose=0)
    assert [checkpoints.step_of(p) for p in checkpoints.list_checkpoints(ckpt_dir)] == [2]
    assert checkpoints.saved_step(backup_dir) == 2
    with pytest.raises(TrainingDiverged, match="step-0000004.weights.h5 was not written"):
        callbacks[-1].save()  # the backup, at step 4
    assert checkpoints.saved_step(backup_dir) == 2 and len(list(backup_dir.glob("*.h5"))) == 1


@pytest.fixture(scope="module")
def saved_number_model(number_translator, tmp_path_factory):
    model, tokenizer, held_out = number_translator
    root = tmp_path_factory.mktemp("evaluate")
    model.save(root / "model.keras")
    tokenizer.save(root / "tokenizer.model")
    (root / "source.txt").write_text("".join(de + "\n" for de, _ in held_out))
    # The reference of every fourth sentence is altered, so that BLEU is neither 0 nor 100.
    references = [
        en if i % 4 else en.replace("one", "eleven").replace("two", "twelve") + " more"
        for i, (_, en) in enumerate(held_out)
    ]
    (root / "reference.txt").write_text("".join(en + "\n" for en in references))
    return root


@pytest.mark.slow
def test_evaluate_bleu_and_chrf_equal_sacrebleu_on_the_files(saved_number_model, capsys):
    root = saved_number_model
    evaluate.main(
        [
            "--model",
            str(root / "model.keras"),
            "--source",
            str(root / "source.txt"),
            "--reference",
            str(root / "reference.txt"),
            "--beam-size",
            "4",
            "--batch-size",
            "7",
        ]
    )
    printed = capsys.readouterr().out
    output = root / "translations.source.txt"
    assert f"translations written to {output}" in printed
    hypotheses = output.read_text().splitlines()
    references = (root / "reference.txt").read_text().splitlines()
    report = json.loads((root / "translations.source.txt.scores.json").read_text())
    assert report["sentences"] == 20
    for name, metric in [
        ("bleu", sacrebleu.metrics.BLEU()),
        ("chrf", sacrebleu.metrics.CHRF()),
        ("chrf++", sacrebleu.metrics.CHRF(word_order=2)),
    ]:
        expected = metric.corpus_score(hypotheses, [references])
        assert 0 < expected.score < 100, name
        assert f"{expected}    ({metric.get_signature()})" in printed
        assert report[name] == expected.score and report[f"{name}_signature"] == str(
            metric.get_signature()
        )
    expected = sacrebleu.metrics.BLEU().corpus_score(hypotheses, [references])
    assert (report["brevity_penalty"], report["length_ratio"]) == (expected.bp, expected.ratio)

    # The exported SavedModel (beam 4 as well) translates the same and scores the same.
    model, tokenizer = (
        keras.models.load_model(root / "model.keras"),
        kt.SubwordTokenizer.load(root / "tokenizer.model"),
    )
    export_for_serving(kt.Translator(model, tokenizer, beam_size=4), root / "export")
    evaluate.main(
        [
            "--model",
            str(root / "export"),
            "--source",
            str(root / "source.txt"),
            "--reference",
            str(root / "reference.txt"),
            "--output",
            str(root / "saved.txt"),
        ]
    )
    assert (root / "saved.txt").read_text().splitlines() == hypotheses
    assert str(expected) in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--model", "{root}/missing.keras"], "missing.keras: no such file or directory"),
        (["--model", "{root}"], r"holds no SavedModel and no numbered version directory"),
        (
            ["--model", "{root}/model.keras", "--tokenizer", "{root}/other.model"],
            "tokenizer .*other.model does not exist",
        ),
        (
            ["--model", "{root}/model.keras", "--reference", "{root}/reference.txt"],
            "--reference needs --source",
        ),
        (
            ["--model", "{root}", "--sample"],
            "is a directory \\(a SavedModel or a CTranslate2 model\\), which decodes with its own "
            "search; --sample needs",
        ),
        (
            ["--model", "{root}", "--jit-compile"],
            "is a directory \\(a SavedModel or a CTranslate2 model\\), which decodes with its own "
            "search; --jit-compile",
        ),
        (
            ["--model", "{root}/model.keras", "--sample", "--top-p", "1.5"],
            r"argument --top-p: expected a number in \(0, 1\], got 1.5",
        ),
    ],
)
def test_evaluate_bad_input(saved_number_model, capsys, arguments, message):
    root = saved_number_model
    arguments = [a.format(root=root) for a in arguments]
    if "--source" not in arguments and "--reference" not in arguments:
        arguments += [
            "--source",
            str(root / "source.txt"),
            "--reference",
            str(root / "reference.txt"),
        ]
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(arguments)
    assert exit_info.value.code in (1, 2)
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.slow
def test_evaluate_samples_a_monolingual_file_reproducibly(saved_number_model, capsys):
    """Back-translation: --source without --reference, sampled; a seed repeats its draws."""
    root = saved_number_model
    outputs = []
    for seed, name in ((3, "a"), (3, "b"), (4, "c")):
        evaluate.main(
            [
                "--model",
                str(root / "model.keras"),
                "--source",
                str(root / "source.txt"),
                "--sample",
                "--temperature",
                "3.0",
                "--seed",
                str(seed),
                "--output",
                str(root / f"sampled.{name}.txt"),
            ]
        )
        outputs.append(read_lines(root / f"sampled.{name}.txt"))  # split at \n alone
    printed = capsys.readouterr().out
    assert "BLEU" not in printed and f"translations written to {root / 'sampled.c.txt'}" in printed
    assert len(outputs[0]) == 20 and all(outputs[0])
    assert outputs[0] == outputs[1] and outputs[0] != outputs[2]
