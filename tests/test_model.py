"""Figure 1 as a whole: masks, the decoding cache, serialization and precision."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import random_ids

import keras_transformer as kt

VOCAB = 37


def tiny_model(**overrides):
    config = kt.TransformerConfig.preset("tiny", vocab_size=VOCAB, **overrides)
    return kt.build_transformer(config)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(7)
    return tiny_model()


def run(model, source, target):
    return np.asarray(model({"source": source, "target": target}, training=False))


def test_changing_target_token_t_changes_no_earlier_logit(model):
    rng = np.random.default_rng(0)
    source, target = random_ids(rng, 2, 6, VOCAB), random_ids(rng, 2, 8, VOCAB)
    logits = run(model, source, target)
    for t in range(1, 8):
        changed = target.copy()
        changed[:, t] = (changed[:, t] - 4 + 1) % (VOCAB - 4) + 4
        changed_logits = run(model, source, changed)
        np.testing.assert_allclose(changed_logits[:, :t], logits[:, :t], atol=1e-5)
        assert not np.allclose(changed_logits[:, t:], logits[:, t:], atol=1e-5)


def test_source_padding_changes_no_logit(model):
    rng = np.random.default_rng(1)
    source, target = random_ids(rng, 2, 5, VOCAB), random_ids(rng, 2, 6, VOCAB)
    logits = run(model, source, target)
    padded = np.pad(source, ((0, 0), (0, 4)))
    np.testing.assert_allclose(run(model, padded, target), logits, atol=1e-5)
    # Ragged batch: the shorter sentence is padded, its logits equal those computed alone.
    batch_source = np.pad(source, ((0, 0), (0, 3)))
    batch_source[1, 5:] = random_ids(rng, 1, 3, VOCAB)
    batch_logits = run(model, batch_source, target)
    np.testing.assert_allclose(batch_logits[0], logits[0], atol=1e-5)
    assert not np.allclose(batch_logits[1], logits[1], atol=1e-5)


def test_target_padding_changes_no_logit_of_real_positions(model):
    rng = np.random.default_rng(2)
    source, target = random_ids(rng, 2, 5, VOCAB), random_ids(rng, 2, 6, VOCAB)
    logits = run(model, source, target)
    padded = np.pad(target, ((0, 0), (0, 3)))
    np.testing.assert_allclose(run(model, source, padded)[:, :6], logits, atol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"norm_first": True, "positional": "learned", "share_embeddings": False}],
    ids=["paper", "prenorm-learned-unshared"],
)
@pytest.mark.parametrize("growing", [False, True], ids=["preallocated", "growing"])
def test_cached_decoding_equals_full_sequence(overrides, growing):
    """Step by step through the cache, preallocated for 9 positions (written at cache_index)
    or growing (appended to), the decoder gives the full pass's logits; a growing cache holds
    exactly the positions read so far."""
    model = tiny_model(**overrides)
    rng = np.random.default_rng(3)
    source = random_ids(rng, 2, 7, VOCAB)
    source[1, 5:] = 0
    target = random_ids(rng, 2, 9, VOCAB)
    full = run(model, source, target)

    source_mask = source != 0
    memory = model.encoder(model.embedding(source, mode="source"), padding_mask=source_mask)
    cache = model.decoder.build_cache(memory, max_length=None if growing else 9)
    step_logits = []
    for t in range(9):
        x = model.embedding(target[:, t : t + 1], mode="target")
        out, cache = model.decoder(
            x,
            None,
            source_padding_mask=source_mask,
            cache=cache,
            cache_index=None if growing else t,
        )
        step_logits.append(np.asarray(model.embedding(out, mode="logits")))
        assert cache[0]["self"]["key"].shape[2] == (t + 1 if growing else 9)
    np.testing.assert_allclose(np.concatenate(step_logits, 1), full, atol=1e-4)


def test_beams_share_their_sentence_memory_cache():
    """With build_cache(memory, beam_size=3) the 3 adjacent rows of each sentence read its one
    copy of the memory's keys and values: outputs and attention weights equal those of a cache
    built on the memory repeated per row."""
    model = tiny_model()
    rng = np.random.default_rng(9)
    source = random_ids(rng, 2, 6, VOCAB)
    source[0, 4:] = 0
    target = random_ids(rng, 6, 4, VOCAB)
    source_mask = source != 0
    memory = model.encoder(model.embedding(source, mode="source"), padding_mask=source_mask)
    shared = model.decoder.build_cache(memory, beam_size=3)
    repeated = model.decoder.build_cache(np.repeat(memory, 3, axis=0))
    assert shared[0]["cross"]["key"].shape[0] == 2 and shared[0]["self"]["key"].shape[0] == 6
    for t in range(4):
        x = model.embedding(target[:, t : t + 1], mode="target")
        results = []
        for cache, mask in ((shared, source_mask), (repeated, np.repeat(source_mask, 3, axis=0))):
            out, cache, weights = model.decoder(
                x, None, source_padding_mask=mask, cache=cache, return_attention_scores=True
            )
            results.append((cache, out, weights))
        (shared, *ours), (repeated, *theirs) = results
        for a, b in zip(tf.nest.flatten(ours), tf.nest.flatten(theirs)):
            np.testing.assert_allclose(a, b, atol=1e-5)


def test_decoder_returns_cross_attention_weights_per_layer(model):
    source = np.array([[5, 6, 7, 0]], "int32")
    memory = model.encoder(model.embedding(source, mode="source"), padding_mask=source != 0)
    x = model.embedding(np.array([[2, 9]], "int32"), mode="target")
    _, weights = model.decoder(
        x, memory, source_padding_mask=source != 0, return_attention_scores=True
    )
    assert len(weights) == 2 and tuple(weights[0].shape) == (1, 4, 2, 4)
    assert np.all(np.asarray(weights[0])[..., 3] == 0.0)


@pytest.mark.slow
def test_save_and_load_round_trip(tmp_path):
    model = tiny_model()
    rng = np.random.default_rng(4)
    source, target = random_ids(rng, 3, 5, VOCAB), random_ids(rng, 3, 4, VOCAB)
    model.compile(
        optimizer=kt.create_optimizer(model.config),
        loss=kt.LabelSmoothedCrossEntropy(0.2),
        metrics=[kt.MaskedAccuracy()],
    )
    model.fit({"source": source, "target": target}, target, verbose=0)  # optimizer state too
    path = tmp_path / "x.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, kt.Transformer)
    assert restored.config == model.config
    assert restored.loss.label_smoothing == 0.2
    assert restored.optimizer.get_config()["learning_rate"]["class_name"] == "TransformerSchedule"
    assert int(restored.optimizer.iterations) == 1
    for saved, loaded in zip(model.optimizer.variables, restored.optimizer.variables):
        np.testing.assert_array_equal(loaded, saved)
    restored.evaluate({"source": source, "target": target}, target, verbose=0)
    np.testing.assert_array_equal(run(restored, source, target), run(model, source, target))


def test_dtype_policy_survives_save_and_load(tmp_path):
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = tiny_model()
    model.save(tmp_path / "bf16.keras")
    keras.config.set_dtype_policy("float32")
    restored = keras.models.load_model(tmp_path / "bf16.keras")
    assert restored.encoder.layers[0].feed_forward.inner.compute_dtype == "bfloat16"
    assert restored.decoder.dtype_policy.name == "mixed_bfloat16"


@pytest.mark.slow
def test_mixed_bfloat16_gives_float32_logits_and_trains_without_nan():
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = tiny_model()
    rng = np.random.default_rng(5)
    source, target = random_ids(rng, 4, 6, VOCAB), random_ids(rng, 4, 7, VOCAB)
    source[0, 3:] = 0
    logits = model({"source": source, "target": target})
    assert logits.dtype == "float32"
    assert model.encoder.layers[0].self_attention.compute_dtype == "bfloat16"
    model.compile(optimizer=kt.create_optimizer(model.config), loss=kt.LabelSmoothedCrossEntropy())
    history = model.fit({"source": source, "target": target}, target, epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert np.all(np.isfinite(np.asarray(model({"source": source, "target": target}))))


@pytest.mark.parametrize(
    "inputs, message",
    [
        (
            {"source": np.ones((2, 3), "float32"), "target": np.ones((2, 3), "int32")},
            "'source' must hold integer token ids .* got dtype float32",
        ),
        (
            {"source": np.ones((2, 3), "int32"), "target": np.ones((2, 3, 4), "int32")},
            r"'target' must have rank 2 \[batch, length\]; got shape \(2, 3, 4\)",
        ),
        (
            {"source": np.ones((3,), "int32"), "target": np.ones((2, 3), "int32")},
            r"'source' must have rank 2 \[batch, length\]; got shape \(3,\)",
        ),
        (
            {"src": np.ones((2, 3), "int32"), "target": np.ones((2, 3), "int32")},
            r"Missing data for input \"source\".*Expected the following keys: \['source', "
            r"'target'\]",
        ),
        (np.ones((2, 3), "int32"), r"expects 2 named input\(s\) with keys \['source', 'target'\]"),
        ([np.ones((2, 3), "int32")] * 2, r"must be a dict \{\"source\": .*; got list"),
    ],
    ids=["float-source", "rank3-target", "rank1-source", "wrong-key", "not-a-dict", "list"],
)
def test_bad_inputs_say_what_was_expected(model, inputs, message):
    with pytest.raises(ValueError, match=message):
        model(inputs)
