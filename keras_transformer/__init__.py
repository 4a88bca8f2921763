"""keras-transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)
as Keras 3 layers.

The layers, the model, the loss and the optimizer run under any Keras backend (TensorFlow, JAX,
PyTorch). The tokenizer, the tf.data pipeline (`data`), the decoding loops and `Translator`
need TensorFlow: they are imported on first use, so `import keras_transformer` works without it.
"""

import importlib
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_transformer import layers  # noqa: E402
from keras_transformer.config import PRESETS, TransformerConfig  # noqa: E402
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
    "data": "keras_transformer.data",
    "SubwordTokenizer": "keras_transformer.tokenizer",
    "beam_search": "keras_transformer.decoding",
    "greedy_search": "keras_transformer.decoding",
    "sample": "keras_transformer.decoding",
    "Sampling": "keras_transformer.decoding",
    "encoder_decoder_attention": "keras_transformer.decoding",
    "Translator": "keras_transformer.translator",
    "score": "keras_transformer.scoring",
}


def __getattr__(name):
    """Imports a TensorFlow-only name on first use (PEP 562); says so when TensorFlow is missing."""
    module_name = TENSORFLOW_ONLY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name not in ("tensorflow", "tensorflow_text"):
            raise
        raise ImportError(
            f"keras_transformer.{name} needs TensorFlow and tensorflow-text ({error.name} is "
            "not installed): the tokenizer, the data pipeline, decoding and Translator run on "
            "TensorFlow; the layers, the model, the loss and the optimizer run on any backend"
        ) from error
    value = module if module_name.endswith(f".{name}") else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *TENSORFLOW_ONLY])


__all__ = [
    "PRESETS",
    "Sampling",
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
    "masked_accuracy",
    "sample",
    "score",
    "update_vocabulary",
]
