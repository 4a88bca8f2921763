"""keras-transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)
as Keras 3 layers.

The layers, the model, the loss and the optimizer run under any Keras backend (TensorFlow, JAX,
PyTorch), and so does binarized data (`data.binarized`). The tokenizer, the tf.data pipeline
(`data.make_batches`), the decoding loops and `Translator` need TensorFlow: they are imported on
first use, so `import keras_transformer` works without it. `load_translator` opens a saved
model (a SavedModel export, a CTranslate2 folder, a .keras model) for translation in Python.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_transformer import data, layers  # noqa: E402
from keras_transformer.config import PRESETS, TransformerConfig  # noqa: E402
from keras_transformer.inference import Scored, Translation, load_translator  # noqa: E402
from keras_transformer.lazy import lazy_attribute  # noqa: E402
from keras_transformer.losses import (  # noqa: E402
    LabelSmoothedCrossEntropy,
    MaskedAccuracy,
    masked_accuracy,
)
from keras_transformer.model import Transformer, build_transformer  # noqa: E402
from keras_transformer.optimization import TransformerSchedule, create_optimizer  # noqa: E402
from keras_transformer.vocabulary import update_vocabulary  # noqa: E402

__version__ = "0.1.0"

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
    "Sampling": "keras_transformer.decoding.sampling",
    "encoder_decoder_attention": "keras_transformer.decoding.model_step",
    "Translator": "keras_transformer.translator",
    "score": "keras_transformer.scoring",
}


def __getattr__(name):
    """Imports a TensorFlow-only name on first use (PEP 562); says so when TensorFlow is missing."""
    return lazy_attribute(
        __name__,
        TENSORFLOW_ONLY,
        name,
        "the tokenizer, text data, decoding and Translator run on TensorFlow and tensorflow-text "
        '(pip install "keras-transformer[tensorflow]"); the layers, the model, the loss, the '
        "optimizer and binarized data run on any backend",
    )


def __dir__():
    return sorted([*globals(), *TENSORFLOW_ONLY])


__all__ = [
    "PRESETS",
    "Scored",
    "Translation",
    "Beam",
    "DiverseBeam",
    "Greedy",
    "Sampler",
    "Sampling",
    "Search",
    "SubwordTokenizer",
    "Translator",
    "LabelSmoothedCrossEntropy",
    "MaskedAccuracy",
    "Transformer",
    "TransformerConfig",
    "TransformerSchedule",
    "beam_search",
    "build_transformer",
    "create_optimizer",
    "data",
    "encoder_decoder_attention",
    "greedy_search",
    "layers",
    "load_translator",
    "masked_accuracy",
    "run_search",
    "sample",
    "score",
    "update_vocabulary",
]
