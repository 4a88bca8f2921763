"""Keras 3 backends: the layers and the model train under JAX (and PyTorch when installed)
without TensorFlow, and a .keras file moves between backends with identical logits; a model
trained under JAX is translated and exported by the TensorFlow side."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

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


def run_child(backend, *args):
    """Runs tests/backend_child.py under `backend` on the CPU; returns what it wrote."""
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


@pytest.mark.parametrize("backend", ["jax", TORCH])
def test_the_model_trains_without_tensorflow(backend, tmp_path):
    trained = run_child(backend, "train", tmp_path / "model.keras", 64, "--block-tensorflow")
    assert not trained["tensorflow_imported"]
    losses = trained["losses"]
    assert losses[-1] < 0.7 * losses[0], losses  # the copy task is being learned
    assert (tmp_path / "model.keras").is_file()
    refusals = trained["refusals"].tolist()
    assert len(refusals) == len(kt.TENSORFLOW_ONLY)
    assert all("needs TensorFlow and tensorflow-text" in refusal for refusal in refusals)
    assert any(refusal.startswith("keras_transformer.Translator ") for refusal in refusals)


@pytest.mark.parametrize(
    "trained_under, loaded_under",
    [("jax", "tensorflow"), ("tensorflow", "jax"), (TORCH.values[0], "tensorflow")],
    ids=["jax-to-tensorflow", "tensorflow-to-jax", "torch-to-tensorflow"],
)
def test_a_saved_model_moves_between_backends_with_identical_logits(
    trained_under, loaded_under, tmp_path
):
    if trained_under == "torch" and importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is optional (a large CPU wheel): tested where it is installed")
    path = tmp_path / "model.keras"
    trained = run_child(trained_under, "train", path, 64)
    loaded = run_child(loaded_under, "load", path)
    np.testing.assert_array_equal(trained["source"], loaded["source"])
    np.testing.assert_allclose(loaded["logits"], trained["logits"], atol=1e-5, rtol=0)


def test_weights_trained_under_jax_are_translated_and_exported_by_tensorflow(tokenizer, tmp_path):
    path = tmp_path / "model.keras"
    trained = run_child("jax", "train", path, tokenizer.vocab_size)
    model = keras.saving.load_model(path)
    inputs = {"source": trained["source"], "target": trained["target"]}
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(inputs)), trained["logits"], atol=1e-5, rtol=0
    )
    translator = kt.Translator(model, tokenizer, beam_size=2)
    sentences = tf.constant(["Das Haus ist groß.", "Der Hund schläft."])
    expected = translator.translate(sentences)
    exported = tf.saved_model.load(str(translator.save(tmp_path / "export")))
    answer = exported.signatures["translate"](sentences)
    np.testing.assert_array_equal(answer["tokens"].numpy(), expected["tokens"].numpy())
    assert answer["translation"].numpy().tolist() == expected["translation"].numpy().tolist()
