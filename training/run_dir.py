"""A run directory and what it holds:

run.json              the model config and data settings; a later command must match them
tokenizer.model       the shared subword vocabulary
backup/               the exact training state (weights, optimizer, epoch) for resuming
checkpoints/          step-NNNNNNN.weights.npz, the last K
logs/                 TensorBoard: train/ (loss, accuracy, learning rate),
                      validation/ (BLEU, chrF, text, attention)
model.keras           the average of the last K checkpoints
translations.test.txt and .scores.json (BLEU, chrF, chrF++), export/<version>/ (the SavedModel)
"""

import json
import pathlib

import keras

import keras_transformer as kt
from training import checkpoints
from training.files import write_text_atomically

SETTINGS_FILE = "run.json"
TOKENIZER_FILE = "tokenizer.model"


class RunError(ValueError):
    """A run directory that cannot be used for this command; nothing in it was changed."""


def check_settings(out_dir, settings):
    """Compares `settings` with those of the run already in `out_dir` (if any) and raises
    RunError naming every field that differs."""
    out_dir = pathlib.Path(out_dir)
    path = out_dir / SETTINGS_FILE
    if not path.is_file():
        written = [
            p
            for p in (out_dir / "checkpoints", out_dir / "backup")
            if p.is_dir() and any(p.iterdir())
        ]
        if written:
            raise RunError(
                f"{out_dir} holds {written[0].name}/ but no {SETTINGS_FILE}: it is not a run of "
                "this "
                "program, or its settings are lost; choose another --output-dir"
            )
        return
    previous = json.loads(path.read_text())
    try:  # config fields added since the run was written take their defaults
        previous["config"] = kt.TransformerConfig.from_dict(previous["config"]).to_dict()
    except (KeyError, TypeError, ValueError):
        pass  # compared as written, and reported field by field
    differences = [
        f"{name}: {previous_value!r} in the run, {value!r} now"
        for name, previous_value, value in _compare(previous, settings)
    ]
    if differences:
        vocabulary = any(d.startswith(("vocabulary", "config.vocab_size")) for d in differences)
        raise RunError(
            ("vocabulary mismatch: " if vocabulary else "")
            + f"{out_dir} holds another model's run ({path}); it differs in "
            + "; ".join(differences)
            + ". Choose another --output-dir, or repeat the run's own settings to continue it."
        )


def _compare(previous, current, prefix=""):
    for key in sorted(set(previous) | set(current)):
        old, new = previous.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            yield from _compare(old, new, f"{prefix}{key}.")
        elif old != new:
            yield f"{prefix}{key}", old, new


def save_settings(out_dir, settings):
    return write_text_atomically(
        pathlib.Path(out_dir) / SETTINGS_FILE, json.dumps(settings, indent=2)
    )


def run_dir_of(path):
    """The run directory a file of it lies in (the directory holding run.json), or None."""
    for directory in pathlib.Path(path).resolve().parents[:2]:
        if (directory / SETTINGS_FILE).is_file():
            return directory
    return None


def tokenizer_beside(model_path):
    """The tokenizer of a model file: tokenizer.model beside it or in its run directory."""
    model_path = pathlib.Path(model_path)
    beside = model_path.with_name(TOKENIZER_FILE)
    run_dir = run_dir_of(model_path)
    return beside if beside.is_file() or run_dir is None else run_dir / TOKENIZER_FILE


def build_model(out_dir):
    """The model that the run in `out_dir` trains, freshly initialized."""
    settings = json.loads((pathlib.Path(out_dir) / SETTINGS_FILE).read_text())
    return kt.build_transformer(kt.TransformerConfig.from_dict(settings["config"]))


def load_model(path):
    """A .keras model, or a run's step checkpoint (.weights.npz) in the model its run.json
    describes."""
    path = pathlib.Path(path)
    if path.name.endswith(".weights.npz"):
        run_dir = run_dir_of(path)
        if run_dir is None:
            raise ValueError(
                f"{path} is a step checkpoint, but no {SETTINGS_FILE} was found above it to build "
                "its model"
            )
        model = build_model(run_dir)
        checkpoints.load_checkpoint(model, path)
        return model
    if path.suffix != ".keras":
        raise ValueError(
            f"{path}: expected a .keras model, a step checkpoint (.weights.npz) or a SavedModel "
            "directory"
        )
    return keras.models.load_model(path)
