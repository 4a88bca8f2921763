"""keras-transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)
as Keras 3 layers.

The layers, the model, the loss and the optimizer run under any Keras backend (TensorFlow, JAX,
PyTorch), and so does binarized data (`data.binarized`). The tokenizer, the tf.data pipeline
(`data.make_batches`), the decoding loops and `Translator` need TensorFlow. Every name that needs
Keras is imported on first use, so `import keras_transformer` imports neither Keras nor
TensorFlow: `Translation`, `Scored` and `load_translator` need neither, and a serving client
answers with them. Once Keras is imported, the modules of the layers, the model, the loss and the
optimizer are too, so that `keras.saving.load_model` finds their classes; Keras imported after
the package runs on TensorFlow unless KERAS_BACKEND names another backend. `load_translator`
opens a saved model (a SavedModel export, a CTranslate2 folder, a .keras model) for translation
in Python.
"""

from keras_transformer import data
from keras_transformer.inference import load_translator
from keras_transformer.lazy import KerasClasses, lazy_attribute
from keras_transformer.results import Scored, Translation

__version__ = "0.1.0"

# Public names that need Keras, and the module that defines each.
KERAS = {
    "layers": "keras_transformer.layers",
    "PRESETS": "keras_transformer.config",
    "TransformerConfig": "keras_transformer.config",
    "LabelSmoothedCrossEntropy": "keras_transformer.losses",
    "MaskedAccuracy": "keras_transformer.losses",
    "masked_accuracy": "keras_transformer.losses",
    "Transformer": "keras_transformer.model",
    "build_transformer": "keras_transformer.model",
    "TransformerSchedule": "keras_transformer.optimization",
    "create_optimizer": "keras_transformer.optimization",
    "update_vocabulary": "keras_transformer.vocabulary",
}

# Public names that need TensorFlow, and the module that defines each.
TENSORFLOW_ONLY = {
    "SubwordTokenizer": "keras_transformer.tokenizer",
    "beam_search": "keras_transformer.decoding",
    "greedy_search": "keras_transformer.decoding",
    "run_search": "keras_transformer.decoding",
    "sample": "keras_transformer.decoding",
    "Search": "keras_transformer.decoding.search",
    "Beam": "keras_transformer.decoding.beam",
    "DiverseBeam": "keras_transformer.decoding.diverse",
    "Greedy": "keras_transformer.decoding.greedy",
    "Sampler": "keras_transformer.decoding.sampling",
    "SamplingSettings": "keras_transformer.decoding.sampling",
    "encoder_decoder_attention": "keras_transformer.decoding.model_step",
    "Translator": "keras_transformer.translator",
    "score": "keras_transformer.scoring",
}


NEEDS = {
    **dict.fromkeys(
        KERAS,
        "Keras runs on TensorFlow unless KERAS_BACKEND names another backend; set "
        "KERAS_BACKEND=jax (or torch) to run the layers, the model, the loss and the optimizer "
        "without it",
    ),
    **dict.fromkeys(
        TENSORFLOW_ONLY,
        "the tokenizer, text data, decoding and Translator run on TensorFlow and tensorflow-text "
        '(pip install "keras-transformer[tensorflow]"); the layers, the model, the loss, the '
        "optimizer and binarized data run on any backend",
    ),
}
KERAS_CLASSES = KerasClasses(__name__, sorted(set(KERAS.values())), backend="tensorflow")


def __getattr__(name):
    """Imports a name that needs Keras or TensorFlow on first use (PEP 562); says so when
    TensorFlow is missing."""
    value = lazy_attribute(__name__, {**KERAS, **TENSORFLOW_ONLY}, name, NEEDS.get(name))
    KERAS_CLASSES.import_if_keras()
    return value


def __dir__():
    return sorted([*globals(), *KERAS, *TENSORFLOW_ONLY])


__all__ = ["Scored", "Translation", "data", "load_translator", *sorted([*KERAS, *TENSORFLOW_ONLY])]

KERAS_CLASSES.watch()  # last: the modules it imports may use the names above
