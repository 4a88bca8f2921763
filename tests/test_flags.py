"""`training.train`'s parser is generated from the TrainingPlan's fields (`flags.add_dataclass`):
each setting has one flag, with the field's default and a help, and the parsed flags make the
plan back; and the programs read the files their flags name by one rule. Fast: nothing trains."""

import dataclasses
import importlib
import io

import pytest

from training import train
from training.plan import TrainingPlan


def settings(cls):
    """(field, its flag's `Option`) of every setting of the dataclass `cls`, its sections'
    included."""
    for field in dataclasses.fields(cls):
        if "title" in field.metadata:  # a section
            yield from settings(field.default_factory)
        else:
            yield field, field.metadata["option"]


def default_of(field):
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def test_every_setting_has_one_flag_with_its_default_and_help():
    parser = train.build_parser()
    flagged = [action for action in parser._actions if action.dest not in ("help", "verbose")]
    found = list(settings(TrainingPlan))
    # the flat plan's 42, --subword-sampling, --subword-model, --tag-phrases and
    # --sentence-alternatives
    assert len(found) == len(flagged) == 46
    for field, option in found:
        actions = [action for action in flagged if action.dest == option.attribute]
        assert len(actions) == 1, field.name
        (action,) = actions
        assert action.option_strings == [option.flag]
        assert action.help and action.help == option.help
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            assert action.required, field.name
        else:
            assert not action.required and action.default == default_of(field), field.name


def test_the_parsed_defaults_make_the_fields_defaults(tmp_path):
    args = train.build_parser().parse_args(["--run-dir", str(tmp_path)])
    plan = TrainingPlan.from_flags(args)
    assert plan == TrainingPlan(run_dir=tmp_path).with_defaults().checked()
    for field, option in settings(TrainingPlan):  # the Namespace holds what the fields hold
        if field.name not in ("preset", "steps", "every", "keep", "export_dir", "run_dir"):
            assert getattr(args, option.attribute) == default_of(field), field.name


@pytest.mark.parametrize(
    "preset, steps, every, keep",
    [("base", 100000, 1500, 5), ("big", 300000, 600, 20), ("small", 100000, None, 5)],
)
def test_the_paper_s_schedule_fills_what_is_not_given(tmp_path, preset, steps, every, keep):
    """§5.2's steps and §6.1's checkpoints (10 minutes apart at the paper's speed; the last 5
    or 20 averaged) and search (beam 4, alpha 0.6, 50 extra tokens)."""
    argv = ["--run-dir", str(tmp_path), "--preset", preset]
    plan = TrainingPlan.from_flags(train.build_parser().parse_args(argv))
    assert (plan.schedule.steps, plan.checkpoints.every, plan.checkpoints.keep) == (
        steps,
        every,
        keep,
    )
    assert plan.checkpoint_interval == (every or plan.schedule.steps_per_epoch)
    search = plan.evaluation
    assert (search.beam_size, search.alpha, search.extra_length) == (4, 0.6, 50)
    assert plan.evaluation.export_dir == tmp_path / "export"


def test_sections_are_the_help_s_groups_and_steps_exclude_epochs(tmp_path, capsys):
    parser = train.build_parser()
    titles = [group.title for group in parser._action_groups]
    assert titles[2:] == [
        "model",
        "data",
        "schedule",
        "checkpoints",
        "evaluation and export",
        "hardware",
        "fine-tuning and the best checkpoint",
    ]
    with pytest.raises(SystemExit):
        parser.parse_args(["--run-dir", str(tmp_path), "--steps", "5", "--epochs", "2"])
    assert "--epochs: not allowed with argument --steps" in capsys.readouterr().err
    args = parser.parse_args(["--run-dir", str(tmp_path), "--checkpoint-every", "7"])
    plan = TrainingPlan.from_flags(args)
    assert (plan.checkpoints.every, plan.checkpoint_interval) == (7, 7)


@pytest.mark.parametrize(
    "program, arguments, stdin, message",
    [
        ("serving.translate", ["--source", "{bad}"], None, "--source {bad}:3: not UTF-8 (byte 5"),
        ("serving.score", ["--source", "{good}", "--target", "{bad}"], None, "--target {bad}:3:"),
        ("serving.score", ["--source", "{bad}", "--target", "{good}"], None, "--source {bad}:3:"),
        ("training.evaluate", ["--source", "{good}", "--reference", "{bad}"], None, "--reference"),
        ("serving.translate", [], b"eins\nzwei\ndrei \xff\n", "standard input:3: not UTF-8"),
        ("serving.translate", ["eins", "zwei \udcff"], None, "sentence 2 of the arguments:"),
        ("serving.translate", ["--source", "{missing}"], None, "--source {missing}: no such file"),
    ],
)
def test_programs_refuse_text_that_is_not_utf8_naming_the_flag_file_and_line(
    program, arguments, stdin, message, tmp_path, capsys
):
    """The programs read sentences by the one rule of `keras_transformer.data.corpus`
    (`split_lines`) before they open the model, and refuse bytes that are not UTF-8 naming the
    flag, file and line (stdin: its line; an argument: its number)."""
    files = {"bad": tmp_path / "bad.de", "good": tmp_path / "good.de", "missing": tmp_path / "no"}
    files["bad"].write_bytes(b"eins\nzwei\ndrei\xff vier\n")
    files["good"].write_bytes(b"eins\nzwei\ndrei\n")
    argv = ["--model", str(tmp_path / "no-model"), *(a.format(**files) for a in arguments)]
    given = {} if stdin is None else {"stdin": io.TextIOWrapper(io.BytesIO(stdin))}
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(program).main(argv, **given)
    assert exit_info.value.code == 1
    error = capsys.readouterr().err
    assert f"error: {message.format(**files)}" in error
    assert "not UTF-8" in error or "no such file" in error
