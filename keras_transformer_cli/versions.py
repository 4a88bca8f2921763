"""TensorFlow Serving's layout: a model's base directory of numbered version directories, each
a SavedModel with warm-up requests, appearing whole or not at all. Training's final export and
`serving.export` both write it; `serving.translate`, `training.evaluate` and the summary read
it."""

import contextlib
import errno
import json
import os
import pathlib
import shutil
import tempfile

from keras_transformer_cli.files import remove_stale, temporary_prefix

WARMUP_SENTENCES = ("Guten Morgen.", "Das ist ein Test.", "")
WARMUP_FILE = pathlib.PurePath("assets.extra", "tf_serving_warmup_requests")
# The search the export's graph runs, and its length limits, for the programs that read it
# (TensorFlow Serving ignores assets.extra but for its warm-up file).
SETTINGS_FILE = pathlib.PurePath("assets.extra", "keras_transformer.json")


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


def export_for_serving(translator, base_dir, version=None):
    """Writes `translator` (`Translator.save`) as `base_dir/<version>/`, the layout TensorFlow
    Serving watches, with warm-up requests in `assets.extra/tf_serving_warmup_requests`.

    `version` defaults to the next integer after the existing ones. Everything is written to a
    temporary directory that is renamed into place, so the server never sees a half-written
    version; an existing version is never overwritten, and a failed export leaves nothing it
    made (the base directory included). Returns the version directory. `SETTINGS_FILE` records
    the search the graph runs.
    """
    base_dir = pathlib.Path(base_dir)
    if version is not None and (base_dir / str(version)).exists():
        raise FileExistsError(
            f"{base_dir / str(version)} already exists; a served version is never overwritten"
        )
    made = [p for p in (base_dir, *base_dir.parents) if not p.exists()]
    base_dir.mkdir(parents=True, exist_ok=True)
    remove_stale(base_dir, "export")  # what a killed export left
    staging = pathlib.Path(tempfile.mkdtemp(prefix=temporary_prefix("export"), dir=base_dir))
    published = None
    try:
        with disk_full_named(base_dir):
            translator.save(staging)
            write_warmup_requests(staging / WARMUP_FILE, base_dir.name)
        (staging / SETTINGS_FILE).write_text(json.dumps(search_settings(translator)))
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the model from a server run as another
        published = _publish(staging, base_dir, version)
        return published
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        for directory in made if published is None else ():
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()


# How TensorFlow's C++ writers word a full disk and a file-size limit, in the op errors they
# raise (their text names a temporary file inside a function node: never shown).
DISK_FULL = {"No space left on device": errno.ENOSPC, "File too large": errno.EFBIG}


@contextlib.contextmanager
def disk_full_named(path):
    """Re-raises a full disk met by TensorFlow's writers as an OSError naming `path`."""
    try:
        yield
    except Exception as error:
        found = next((code for text, code in DISK_FULL.items() if text in str(error)), None)
        if found is None:
            raise
        raise OSError(found, os.strerror(found), str(path)) from None


def search_settings(translator):
    """What the export's graph decodes with: the search (§6.1), its n-best, whether it samples,
    and the lengths it holds."""
    return {
        "beam_size": translator.beam_size,
        "alpha": translator.alpha,
        "extra_length": translator.extra_length,
        "nbest": translator.nbest,
        "sampling": translator.sampling is not None,
        "search": repr(translator.search),  # e.g. "Beam(beam_size=4, alpha=0.6)"
        "max_source_length": translator.max_source_length,
        "max_length": translator.model.config.max_length,
    }


def read_search_settings(version_dir):
    """The export's SETTINGS_FILE, {} for an export written before it was recorded."""
    path = pathlib.Path(version_dir) / SETTINGS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _publish(staging, base_dir, version):
    """Renames `staging` to the version directory `version`, or to the next number after every
    numbered directory present; an export that loses a race for a number takes the next one."""
    numbers = [int(p.name) for p in base_dir.iterdir() if p.name.isdigit()]
    number = max(numbers, default=0) + 1 if version is None else int(version)
    while True:
        target = base_dir / str(number)
        try:
            os.rename(staging, target)  # atomic; fails onto a version another export wrote
            return target
        except OSError as error:
            if not target.exists():
                raise  # not a version taken meanwhile: a permission, a full disk, ...
            if version is not None:
                raise FileExistsError(
                    f"{target} already exists; a served version is never overwritten"
                ) from error
            number += 1


def write_warmup_requests(path, model_name, sentences=WARMUP_SENTENCES):
    """TensorFlow Serving's warm-up file: PredictionLog records the server replays on load."""
    import tensorflow as tf

    try:
        from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2
    except ImportError as error:
        raise ImportError(
            "writing TensorFlow Serving warm-up requests needs tensorflow-serving-api: "
            "pip install 'keras-transformer[serving]'"
        ) from error
    path.parent.mkdir(parents=True, exist_ok=True)
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=model_name, signature_name="serving_default")
    )
    request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(list(sentences), dtype=tf.string))
    record = prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request)
    )
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(record.SerializeToString())
