"""keras-transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017)
as TensorFlow/Keras 3 layers."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_transformer import data, layers  # noqa: E402
from keras_transformer.config import PRESETS, TransformerConfig  # noqa: E402
from keras_transformer.decoding import beam_search, encoder_decoder_attention, greedy_search  # noqa: E402
from keras_transformer.losses import (  # noqa: E402
    LabelSmoothedCrossEntropy,
    MaskedAccuracy,
    masked_accuracy,
)
from keras_transformer.model import Transformer, build_transformer  # noqa: E402
from keras_transformer.optimization import TransformerSchedule, create_optimizer  # noqa: E402
from keras_transformer.tokenizer import SubwordTokenizer  # noqa: E402
from keras_transformer.translator import Translator  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
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
]
