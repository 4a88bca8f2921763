"""Keras 3 backends: the layers and the model train under JAX (and PyTorch when installed)
without TensorFlow, and a .keras file moves between backends with identical logits; a model
trained under JAX is translated and exported by the TensorFlow side. A backend other than
TensorFlow runs tests/backend_child.py in a child process: one child trains under each backend
once a run, for every test that reads its model, and loading under JAX takes a child of its
own."""

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from backend_child import initial_path
from backend_child import main as run_here
from conftest import made_once, shared_directory

import keras_transformer as kt

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHILD = ROOT / "tests" / "backend_child.py"
TORCH = pytest.param(
    "torch",
    marks=pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="PyTorch is optional (a large CPU wheel): tested where it is installed",
    ),
)


def run_under(backend, *args):
    """tests/backend_child.py ARGS under `backend`: TensorFlow (this process's backend) here,
    another in a child process on the CPU; returns what it wrote."""
    if backend == "tensorflow":
        run_here(*map(str, args))
    else:
        env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT)}
        env.update(JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
        completed = subprocess.run(
            [sys.executable, str(CHILD), *map(str, args)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
    return np.load(f"{args[1]}.{args[0]}.{backend}.npz")


@pytest.fixture(scope="session")
def trained_without_tensorflow(tokenizer, tmp_path_factory, worker_id):
    """The tiny model trained 8 epochs on the copy task under a backend, at the shared
    tokenizer's size, tensorflow unimportable: a function of the backend giving (the path of
    its model.keras, what the child wrote). One child a backend and run: the first pytest worker
    to need it trains, the others load what it wrote."""
    shared = shared_directory(tmp_path_factory, worker_id)

    def trained(backend):
        path = shared / f"trained-under-{backend}" / "model.keras"
        with made_once(shared, f"trained-under-{backend}"):
            written = pathlib.Path(f"{path}.train.{backend}.npz")  # the child's last write
            if not written.is_file():
                path.parent.mkdir(exist_ok=True)
                run_under(backend, "train", path, tokenizer.vocab_size, 8, "--block-tensorflow")
        return path, np.load(written)

    return trained


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", TORCH])
def test_the_model_trains_without_tensorflow(backend, trained_without_tensorflow):
    path, trained = trained_without_tensorflow(backend)
    assert not trained["tensorflow_imported"]
    losses = trained["losses"]
    # Below the entropy of the 12 copied ids: the model copies, it does not just count them.
    assert losses[-1] < np.log(12) < losses[0], losses
    assert path.is_file() and initial_path(path).is_file()
    refusals = trained["refusals"].tolist()
    assert len(refusals) == len(kt.TENSORFLOW_ONLY) + 1
    assert all("run on TensorFlow and tensorflow-text" in refusal for refusal in refusals[:-1])
    assert refusals[-1].startswith("keras_transformer.data.make_batches needs TensorFlow")
    assert "binarized data (keras_transformer.data.binarized) does not" in refusals[-1]
    assert any(refusal.startswith("keras_transformer.Translator ") for refusal in refusals)
    assert str(trained["accumulation"]) == (
        "accepted"
        if backend == "jax"
        else "accumulate_steps > 1 (gradient accumulation) needs the TensorFlow or JAX backend; "
        f"Keras runs on {backend}"
    )


def assert_same_weights(saved, loaded):
    """Every weight of the file, bit for bit, as the other backend reads it."""
    names = [name for name in saved.files if name.startswith("weight_")]
    assert names and names == [name for name in loaded.files if name.startswith("weight_")]
    for name in names:
        np.testing.assert_array_equal(loaded[name], saved[name], err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize(
    "saved_under, loaded_under",
    [("jax", "tensorflow"), ("tensorflow", "jax"), (TORCH.values[0], "tensorflow")],
    ids=["jax-to-tensorflow", "tensorflow-to-jax", "torch-to-tensorflow"],
)
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")  # none built yet
def test_a_saved_model_moves_between_backends_with_identical_logits(
    saved_under, loaded_under, trained_without_tensorflow, tmp_path
):
    """The compiled model as initialised (its logits compared at float32's rounding: trained
    weights meet kernels that round differently, see the next test)."""
    if saved_under == "torch" and importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is optional (a large CPU wheel): tested where it is installed")
    if saved_under == "tensorflow":
        path = tmp_path / "model.keras"
        saved = run_under(saved_under, "train", path, 64, 0)
    else:
        shared = initial_path(trained_without_tensorflow(saved_under)[0])
        saved = np.load(f"{shared}.train.{saved_under}.npz")
        path = shutil.copy(shared, tmp_path / "model.keras")  # the load writes beside it
    loaded = run_under(loaded_under, "load", path)
    np.testing.assert_array_equal(saved["source"], loaded["source"])
    assert_same_weights(saved, loaded)
    np.testing.assert_allclose(loaded["logits"], saved["logits"], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_weights_trained_under_jax_are_translated_and_exported_by_tensorflow(
    tokenizer, trained_without_tensorflow, tmp_path
):
    path, trained = trained_without_tensorflow("jax")
    model = keras.saving.load_model(path)
    for i, weight in enumerate(model.weights):
        np.testing.assert_array_equal(weight.numpy(), trained[f"weight_{i}"])
    inputs = {"source": trained["source"], "target": trained["target"]}
    # Trained weights are larger than initial ones, and XLA's and TensorFlow's float32 kernels
    # round differently: measured up to 6e-5 apart on logits of magnitude ~6 (a few ulps per
    # layer); a wrong weight or op differs by far more.
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(inputs)), trained["logits"], atol=2e-4, rtol=0
    )
    translator = kt.Translator(model, tokenizer, beam_size=2)
    sentences = tf.constant(["Das Haus ist groß.", "Der Hund schläft."])
    expected = translator.translate(sentences)
    exported = tf.saved_model.load(str(translator.save(tmp_path / "export")))
    answer = exported.signatures["serving_default"](sentences)
    np.testing.assert_array_equal(answer["tokens"].numpy(), expected["tokens"].numpy())
    assert answer["translation"].numpy().tolist() == expected["translation"].numpy().tolist()
