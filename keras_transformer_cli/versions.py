"""Writes TensorFlow Serving's layout: a model's base directory of numbered version directories,
each a SavedModel with warm-up requests, appearing whole or not at all (training's final export
and `serving.export`). `keras_transformer.exports` reads it back."""

import contextlib
import errno
import json
import os
import pathlib
import shutil
import tempfile

from keras_transformer.exports import SETTINGS_FILE, search_settings
from keras_transformer_cli.files import remove_stale, temporary_prefix

WARMUP_SENTENCES = ("Guten Morgen.", "Das ist ein Test.", "")
WARMUP_FILE = pathlib.PurePath("assets.extra", "tf_serving_warmup_requests")


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
