"""What an export holds, for whoever reads one back: TensorFlow Serving's layout (a base
directory of numbered versions, each a SavedModel that records the search its graph runs) and a
CTranslate2 folder (model.bin, the tokenizer, the model's length limit). Reading needs no
TensorFlow (the package itself imports keras)."""

import json
import pathlib

# The search the export's graph runs, and its length limits, for the programs that read it
# (TensorFlow Serving ignores assets.extra but for its warm-up file).
SETTINGS_FILE = pathlib.PurePath("assets.extra", "keras_transformer.json")
TOKENIZER_FILE = "tokenizer.model"  # the sentencepiece model beside a model, in a folder or run
CTRANSLATE2_LIMITS_FILE = "keras_transformer.json"  # {"max_length": the model's config.max_length}
CTRANSLATE2_MODEL_FILE = "model.bin"


def versions(base_dir):
    """The numbered version directories in `base_dir` that hold a SavedModel, {version: path}
    (a directory without saved_model.pb is not a version)."""
    base_dir = pathlib.Path(base_dir)
    if not base_dir.is_dir():
        return {}
    return {
        int(p.name): p
        for p in base_dir.iterdir()
        if p.name.isdigit() and (p / "saved_model.pb").is_file()
    }


def latest_version(model_dir):
    """`model_dir` itself if it holds a SavedModel, else its highest numbered version."""
    model_dir = pathlib.Path(model_dir)
    if (model_dir / "saved_model.pb").is_file():
        return model_dir
    found = versions(model_dir)
    if not found:
        raise FileNotFoundError(
            f"{model_dir} holds no SavedModel and no numbered version directory"
        )
    return found[max(found)]


def search_settings(translator):
    """What a `kt.Translator` (and so its export's graph) decodes with: the search (§6.1), its
    n-best, whether it samples, the lengths it holds, and whether its search is compiled with
    XLA (`jit_compile`: TensorFlow Serving then needs `--xla_cpu_compilation_enabled=true`)."""
    return {
        "beam_size": translator.beam_size,
        "alpha": translator.alpha,
        "extra_length": translator.extra_length,
        "nbest": translator.nbest,
        "sampling": translator.sampling is not None,
        "search": repr(translator.search),  # e.g. "Beam(beam_size=4, alpha=0.6)"
        "max_source_length": translator.max_source_length,
        "max_length": translator.model.config.max_length,
        "jit_compile": translator.jit_compile,
    }


def read_search_settings(version_dir):
    """The export's SETTINGS_FILE, {} for a SavedModel saved without one (not by
    `export_for_serving`)."""
    path = pathlib.Path(version_dir) / SETTINGS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def limits_of(settings):
    """The pieces a translator holds before eos, {"source", "target"} (a prefix's, a scored
    target's), from `search_settings` (or an export's)."""
    return {"source": settings["max_source_length"] - 1, "target": settings["max_length"] - 1}


def search_name(beam_size, alpha):
    """How a search reads in a description: greedy, or beam search with its width and alpha."""
    return "greedy search" if beam_size == 1 else f"beam search (beam {beam_size}, alpha {alpha})"
