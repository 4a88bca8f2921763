"""Fine-tuning: a new run that starts from a trained model's weights (--init-from MODEL.keras).

The run is new in every other way: its own --run-dir, data, optimizer and schedule (a fresh
Adam, whose moments start at zero, warming up again over warmup_steps). Its config is the
model's (or --preset's, which must then describe the same architecture), changed by --set only
in the fields of `TRAINING_FIELDS`; any other difference is refused, field by field. Its
vocabulary is the model's own tokenizer (tokenizer.model beside the model or in its run
directory), or a new one (--tokenizer, or --vocab-size trained on the new data), into which
`kt.update_vocabulary` carries the rows of the pieces both hold. The weights are read only when
the run has no backup: a resumed run goes on from its own.
"""

import json
import pathlib
import sys
import zipfile

import keras_transformer as kt
from keras_transformer.vocabulary import shared_rows
from keras_transformer_cli import checkpoints, run_dir

# The config fields that change how a model trains, not what its weights mean.
TRAINING_FIELDS = (
    "dropout",
    "attention_dropout",
    "relu_dropout",
    "label_smoothing",
    "warmup_steps",
    "learning_rate_scale",
    "tokens_per_batch",
)
# The config fields of the run's vocabulary, set from its tokenizer (`training.context`).
VOCABULARY_FIELDS = ("vocab_size", "tokenizer_sha256")


def model_config(path):
    """The TransformerConfig dict of the .keras model at `path`, read from its config.json
    (without TensorFlow, which must not start before --cpu-devices splits the CPU)."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise ValueError(
            f"--init-from {path} is a directory; give the model file in it (e.g. "
            f"{path / 'model.keras'})"
        )
    if not path.is_file():
        raise ValueError(f"--init-from {path}: no such file")
    try:
        with zipfile.ZipFile(path) as archive:
            saved = json.loads(archive.read("config.json"))
        kind, config = saved.get("class_name"), saved["config"]["config"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"--init-from {path}: not a readable .keras model ({type(error).__name__}: {error})"
        ) from None
    if kind != "Transformer":
        raise ValueError(f"--init-from {path}: a Keras model, but not a keras-transformer one")
    return config


def fine_tuning_config(plan, base, vocab_size, recorded):
    """The run's config: `base` (the model's config, or the run's own once `recorded` in
    run.json) or --preset, with --set and --tokens-per-batch, sized to `vocab_size`. A new run
    whose architecture differs from the model's is refused, naming each field with both
    values."""
    overrides = {**plan.config_overrides, "vocab_size": vocab_size}
    if plan.model.preset:
        config = kt.TransformerConfig.preset(plan.model.preset, **overrides)
    else:
        config = kt.TransformerConfig.from_dict({**base, **overrides})
    if recorded:
        return config  # a resume: RunState.check names what differs from the run
    model = kt.TransformerConfig.from_dict(base).to_dict()  # fields added since: defaults
    differing = [
        f"{field}: {model[field]!r} in the model, {value!r} now"
        for field, value in config.to_dict().items()
        if field not in (*TRAINING_FIELDS, *VOCABULARY_FIELDS) and value != model[field]
    ]
    if differing:
        raise ValueError(
            f"--init-from {plan.selection.init_from}: --preset/--set would change the model's "
            f"architecture: {'; '.join(differing)}. Fine-tuning may change only "
            f"{', '.join(TRAINING_FIELDS)} (leave --preset out to start from the model's config)"
        )
    return config


def model_tokenizer(init_from):
    """The path of the tokenizer of the model at `init_from`; ValueError when there is none."""
    path = run_dir.tokenizer_beside(init_from)
    if not path.is_file():
        raise ValueError(
            f"--init-from {init_from}: the model's tokenizer is not found ({path} is missing); "
            "put the model's tokenizer.model beside it. (--tokenizer gives the new run a new "
            "vocabulary, into which the model's rows are carried, so the model's own is needed "
            "too.)"
        )
    return path


def initial_weights(init_from, tokenizer):
    """{path: array} of the model at `init_from`, carried over to `tokenizer`'s vocabulary
    when it is not the model's own."""
    old = kt.SubwordTokenizer.load(model_tokenizer(init_from))
    model = run_dir.load_model(init_from)
    if model.config.vocab_size != old.vocab_size:
        raise ValueError(
            f"--init-from {init_from}: the model has {model.config.vocab_size} embedding rows but "
            f"{run_dir.tokenizer_beside(init_from)} has {old.vocab_size} pieces: it is not the "
            "model's tokenizer"
        )
    if old.model_proto != tokenizer.model_proto:
        shared, _ = shared_rows(old, tokenizer)
        print(
            f"vocabulary update: {len(shared)} of the run's {tokenizer.vocab_size} pieces are "
            f"among the model's {old.vocab_size}: their rows are kept, the other "
            f"{tokenizer.vocab_size - len(shared)} drawn anew",
            file=sys.stderr,
        )
        model = kt.update_vocabulary(model, old, tokenizer)
    return checkpoints.weights_of(model)


def with_model_tokenizer(plan):
    """Whether the run uses the model's own tokenizer (no --tokenizer or --vocab-size)."""
    return bool(plan.selection.init_from) and not (plan.data.tokenizer or plan.data.vocab_size)
