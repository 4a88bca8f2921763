import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_and_policy():
    """Every test starts from the same seed and the float32 policy."""
    keras.utils.set_random_seed(1234)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


def random_ids(rng, batch, length, vocab_size, low=4):
    """Non-padding token ids (0-3 are pad/unk/bos/eos)."""
    return rng.integers(low, vocab_size, (batch, length)).astype("int32")
