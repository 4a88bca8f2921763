"""Finishing a run: its final model (the average of the last checkpoints, §6.1, or the best)
written to model.keras and described by its validation figure; on TensorFlow scored on the test
split and exported for TensorFlow Serving, the run recorded as finished in run.json; under other
backends the commands that score and export it under TensorFlow, printed."""

import shlex

import keras_transformer as kt
from keras_transformer.exports import search_name
from keras_transformer.inference import signature_translator
from keras_transformer_cli import checkpoints, console
from keras_transformer_cli.checkpoints import BestState, current_step, read_record
from keras_transformer_cli.files import write_atomically
from keras_transformer_cli.run_dir import RunError, load_model
from keras_transformer_cli.versions import export_for_serving

from . import metrics, validation
from .context import on_tensorflow


def finish(context, model=None):
    """Writes the final model of the run of `context` (a RunContext; `model`: the trained one,
    None when nothing was left to train) into model.keras; on TensorFlow scores it on the test
    split, exports it and records the finished run in run.json. Returns the record
    ({"step", "model", "exported", "validation"}, and "bleu", "chrf", "export" on TensorFlow)."""
    directory = context.directory
    step = current_step(model) if model is not None else context.state.step
    final, exported, figure = final_model(context)
    model_path = write_atomically(directory.model, final.save)
    print(f"{model_path}: {exported}")
    record = {"step": step, "model": directory.relative(model_path), "exported": exported}
    record["validation"] = figure
    if not on_tensorflow():  # decoding and export run on TensorFlow, from the .keras file
        print("translating and exporting need the TensorFlow backend: next,")
        for command in next_commands(context.plan, model_path):
            print(f"  {command}")
        return record
    record |= score_and_export(context, final)
    context.state.save(context.settings(), context.steps, finished=record)
    return record


def final_model(context):
    """(the model the run ends with, what it is, {"metric", "value"} of its validation figure
    or None): the average of the last --keep-checkpoints checkpoints (§6.1), or with
    --final-model best the --keep-best checkpoint."""
    plan, directory = context.plan, context.directory
    if plan.selection.final_model == "best":
        record = read_record(directory.best)
        if not record:
            raise RunError(f"--final-model best: {directory.best} holds no checkpoint")
        model = load_model(directory.best / record["weights"])
        state = BestState(record["metric"], record["step"], record["value"])
        exported = f"the best checkpoint, step {state.step} ({state.describe()})"
        return model, exported, {"metric": state.metric, "value": state.value}
    paths = checkpoints.list_checkpoints(directory.checkpoints)[-plan.checkpoints.keep :]
    model = checkpoints.averaged_model(directory, paths)
    exported = average_description([checkpoints.step_of(p) for p in paths])
    if not plan.selection.keep_best:
        return model, exported, None
    value = validation.figure(context, model)
    exported += f" ({BestState(plan.selection.keep_best).describe(value)})"
    return model, exported, {"metric": plan.selection.keep_best, "value": value}


def average_description(steps):
    """What an average of the checkpoints of `steps` is, for run.json and the summary: the steps
    themselves while they are few, their count and range when many are averaged."""
    if len(steps) <= 5:
        return f"the average of the checkpoints of steps {', '.join(map(str, steps))}"
    return f"the average of the {len(steps)} checkpoints of steps {steps[0]} to {steps[-1]}"


def score_and_export(context, model):
    """Translates the test split with §6.1's search, scores it and exports `model` for
    TensorFlow Serving: {"bleu", "chrf", "export"}."""
    evaluation, split = context.plan.evaluation, context.plan.data.test_split
    translator = kt.Translator(
        model, context.tokenizer, evaluation.beam_size, evaluation.alpha, evaluation.extra_length
    )
    search = search_name(evaluation.beam_size, evaluation.alpha)
    print(f"translating the {len(context.test_pairs)} sentences of the {split} split ({search})")
    output = context.directory.translations(split)
    scores = metrics.evaluate(
        signature_translator(translator, "model").translate, context.test_pairs, output
    )
    version_dir = export_for_serving(translator, evaluation.export_dir)
    print(f"SavedModel exported to {version_dir}")
    return {
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "export": context.directory.relative(version_dir),
    }


def next_commands(plan, model_path):
    """The commands that score and export the model at `model_path` under TensorFlow."""
    corpus, evaluation = plan.data, plan.evaluation
    data = ["--dataset", corpus.dataset]
    for flag, value in (
        ("--source-language", corpus.source_language),
        ("--target-language", corpus.target_language),
        ("--data-dir", corpus.data_dir),
    ):
        data += [flag, str(value)] if value else []
    installed = console.installed_command() is not None  # kt-train: print kt-* commands
    evaluate = ["kt-evaluate"] if installed else ["python", "-m", "training.evaluate"]
    evaluate += ["--model", str(model_path), *data]
    search = ["--beam-size", str(evaluation.beam_size), "--alpha", str(evaluation.alpha)]
    search += ["--extra-length", str(evaluation.extra_length)]
    evaluate += search
    export = ["kt-export"] if installed else ["python", "-m", "serving.export"]
    export += ["--model", str(model_path), *search]
    return [
        shlex.join([*evaluate, "--split", corpus.test_split]),
        shlex.join([*export, "--export-dir", str(evaluation.export_dir)]),
    ]


def report_finished(context):
    """Says that the run is finished and where its model and export are; returns its record."""
    finished = context.state.recorded["finished"]
    early = context.state.stopped_early
    directory = context.directory
    print(
        f"the run in {context.plan.run_dir} is finished at step {finished['step']}"
        + (" (stopped early)" if early else "")
        + f": model {directory.resolve(finished['model'])} "
        f"({finished.get('exported', 'the average')}), export "
        f"{directory.resolve(finished.get('export'))}; nothing to do. "
        + (
            "--early-stopping ended it: to train on, start a new run with --init-from its model."
            if early
            else "Give a larger --steps to train on."
        )
    )
    return finished
