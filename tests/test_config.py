"""Table 3 presets and config validation."""

import pytest

from keras_transformer import TransformerConfig


def test_presets_follow_table_3():
    base = TransformerConfig.preset("base", vocab_size=37000)
    assert (base.num_layers, base.d_model, base.d_ff, base.num_heads, base.dropout) == (
        6,
        512,
        2048,
        8,
        0.1,
    )
    assert (base.label_smoothing, base.warmup_steps, base.key_dim, base.value_dim) == (
        0.1,
        4000,
        None,
        None,
    )
    assert base.positional == "sinusoidal" and base.share_embeddings and not base.norm_first
    assert base.tokens_per_batch == 25000  # §5.1: about 25000 source and 25000 target tokens
    assert TransformerConfig.preset("tiny", vocab_size=100).tokens_per_batch < 25000
    big = TransformerConfig.preset("big", vocab_size=37000)
    assert (big.num_layers, big.d_model, big.d_ff, big.num_heads, big.dropout) == (
        6,
        1024,
        4096,
        16,
        0.3,
    )


def test_numpy_numbers_are_accepted():
    import numpy as np

    config = TransformerConfig.preset("tiny", vocab_size=np.int64(100), dropout=np.float32(0.2))
    assert config.vocab_size == 100


def test_overrides_and_dict_round_trip():
    config = TransformerConfig.preset("base", vocab_size=37000, num_layers=4, d_ff=1024, key_dim=32)
    assert (config.num_layers, config.d_ff, config.key_dim, config.d_model) == (4, 1024, 32, 512)
    assert TransformerConfig.from_dict(config.to_dict()) == config
    recorded = TransformerConfig.preset("tiny", vocab_size=300, tokenizer_sha256="0f" * 32)
    assert TransformerConfig.from_dict(recorded.to_dict()).tokenizer_sha256 == "0f" * 32


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": 100, "num_heads": 3}, "key_dim: d_model=100 is not divisible by num_heads=3"),
        (
            {"d_model": 100, "num_heads": 3, "key_dim": 30},
            "value_dim: d_model=100 is not divisible",
        ),
        ({"d_ff": -1}, "d_ff must be a positive integer, got -1"),
        ({"num_layers": 0}, "num_layers must be a positive integer, got 0"),
        ({"tokens_per_batch": 0}, "tokens_per_batch must be a positive integer, got 0"),
        ({"key_dim": 0}, "key_dim must be a positive integer, got 0"),
        ({"num_heads": 2.5}, "num_heads must be a positive integer, got 2.5"),
        ({"positional": "rotary"}, "positional must be one of .*'rotary'"),
        ({"dropout": 1.0}, r"dropout must be a number in \[0, 1\), got 1.0"),
        ({"dropout": -0.1}, r"dropout must be a number in \[0, 1\), got -0.1"),
        ({"label_smoothing": 1.5}, "label_smoothing must be a number"),
        ({"relu_dropout": 1.0}, r"relu_dropout must be a number in \[0, 1\), got 1.0"),
        ({"norm_first": "yes"}, "norm_first must be True or False"),
        ({"learning_rate_scale": 0}, "learning_rate_scale must be a positive number, got 0"),
        ({"learning_rate_scale": "2"}, "learning_rate_scale must be a positive number, got '2'"),
        ({"layers": 3}, r"unknown config field\(s\) \['layers'\]"),
        ({"tokenizer_sha256": "0f" * 31}, "tokenizer_sha256 must be None or the 64 lowercase hex"),
        ({"tokenizer_sha256": "0F" * 32}, "tokenizer_sha256 must be None or the 64 lowercase hex"),
        ({"tokenizer_sha256": b"0f" * 32}, "tokenizer_sha256 must be None or the 64 lowercase hex"),
    ],
)
def test_invalid_values_name_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig.preset("base", vocab_size=100, **overrides)


def test_unknown_preset_and_missing_vocabulary():
    with pytest.raises(
        ValueError, match=r"unknown preset 'huge'; choose one of \['base', 'big', 'small', 'tiny'\]"
    ):
        TransformerConfig.preset("huge", vocab_size=10)
    with pytest.raises(ValueError, match="vocab_size is required"):
        TransformerConfig.preset("base")
