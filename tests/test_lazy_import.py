"""What `import keras_transformer` loads: neither Keras nor TensorFlow until a name needs them,
and the Keras classes registered for `keras.saving.load_model` whichever is imported first."""

import pytest
from conftest import WITHOUT_TENSORFLOW, run_python

import keras_transformer as kt

LOADED = "print(sorted({'keras', 'tensorflow'} & {name.split('.')[0] for name in sys.modules}))"


def test_the_package_imports_without_keras_and_lists_every_name():
    completed = run_python(
        "-c",
        "import sys, keras_transformer as kt\n"
        f"{LOADED}\n"
        "print(kt.Translation._fields[:3], set(kt.__all__) <= set(dir(kt)))",
    )
    assert completed.stdout.splitlines() == ["[]", "('text', 'score', 'cut') True"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "imports",
    [
        "import keras_transformer\nimport keras",
        "import keras\nimport keras_transformer",
        "from keras_transformer.layers import Encoder\nimport keras",
    ],
    ids=["package-then-keras", "keras-then-package", "a-submodule-first"],
)
def test_a_saved_model_loads_whichever_is_imported_first(imports, tmp_path):
    config = kt.TransformerConfig.preset("tiny", vocab_size=32)
    model = kt.build_transformer(config)
    model.compile(optimizer=kt.create_optimizer(config), loss=kt.LabelSmoothedCrossEntropy())
    model.save(tmp_path / "model.keras")
    completed = run_python(
        "-c",
        f"{imports}\n"
        f"model = keras.saving.load_model({str(tmp_path / 'model.keras')!r})\n"
        "print(type(model).__name__, type(model.loss).__name__)",
        env={"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"},
    )
    assert completed.stdout.split() == ["Transformer", "LabelSmoothedCrossEntropy"]


def test_a_keras_name_without_tensorflow_says_to_choose_a_backend():
    completed = run_python(
        "-c",
        "import keras_transformer as kt\nkt.build_transformer",
        env={**WITHOUT_TENSORFLOW, "KERAS_BACKEND": "tensorflow"},
        status=1,
    )
    assert (
        "ImportError: keras_transformer.build_transformer needs TensorFlow (tensorflow is not "
        "installed): Keras runs on TensorFlow unless KERAS_BACKEND names another backend; set "
        "KERAS_BACKEND=jax (or torch) to run the layers, the model, the loss and the optimizer "
        "without it"
    ) in completed.stderr.splitlines()
