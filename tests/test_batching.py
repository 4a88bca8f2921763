"""§5.1 batching: token budgets, length buckets, teacher forcing and the pipeline report."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import synthetic_pairs

import keras_transformer as kt
from keras_transformer.data import Corpus, bucket_boundaries, make_batches, pipeline_report
from keras_transformer.data.buckets import static_boundaries

BUDGET, MAX_LENGTH = 1024, 48


@pytest.fixture(scope="module")
def pairs():
    return Corpus(synthetic_pairs(1500, seed=1, max_words=40)).dataset()


def test_every_batch_stays_within_its_token_budget(pairs, tokenizer):
    sizes = []
    for inputs, target_out in make_batches(
        pairs, tokenizer, BUDGET, MAX_LENGTH, seed=0
    ).as_numpy_iterator():
        assert inputs["source"].size <= BUDGET and inputs["target"].size <= BUDGET
        assert inputs["source"].shape[1] <= MAX_LENGTH and inputs["target"].shape[1] <= MAX_LENGTH
        sizes.append(len(target_out))
    assert len(set(sizes)) > 3, "short sentences make larger batches"


def test_repeated_batches_are_always_full(pairs, tokenizer):
    """Repeating before batching leaves no end-of-epoch remainders (tf.distribute needs at least
    one pair per replica in every batch)."""
    batches = make_batches(pairs, tokenizer, BUDGET, MAX_LENGTH, repeat=True, seed=0)
    bounds = bucket_boundaries(MAX_LENGTH)
    for inputs, _ in batches.take(60).as_numpy_iterator():
        length = max(inputs["source"].shape[1], inputs["target"].shape[1])
        bound = next(b for b in bounds if length < b)
        assert len(inputs["source"]) == BUDGET // (bound - 1)


def test_bucketing_pads_less_than_fixed_batches(pairs, tokenizer):
    bucketed = pipeline_report(pairs, tokenizer, BUDGET, MAX_LENGTH, bucketing=True)
    fixed = pipeline_report(pairs, tokenizer, BUDGET, MAX_LENGTH, bucketing=False)
    print(
        f"\npadding efficiency: bucketed {bucketed.padding_efficiency:.1%}, fixed "
        f"{fixed.padding_efficiency:.1%}"
    )
    assert bucketed.padding_efficiency >= fixed.padding_efficiency
    assert bucketed.largest_side_tokens <= BUDGET and fixed.largest_side_tokens <= BUDGET
    assert bucketed.kept == fixed.kept


def test_teacher_forcing_shifts_the_target(tokenizer):
    pairs = Corpus([("Das Haus ist groß.", "The house is big.")]).dataset()
    ((inputs, target_out),) = make_batches(
        pairs, tokenizer, 256, 32, shuffle_buffer=0
    ).as_numpy_iterator()
    source_ids = tokenizer.tokenize(tf.constant(["Das Haus ist groß."])).numpy()[0]
    target_ids = tokenizer.tokenize(tf.constant(["The house is big."])).numpy()[0]
    np.testing.assert_array_equal(inputs["source"][0], np.append(source_ids, 3))
    np.testing.assert_array_equal(inputs["target"][0], np.concatenate([[2], target_ids]))
    np.testing.assert_array_equal(target_out[0], np.append(target_ids, 3))
    np.testing.assert_array_equal(inputs["target"][0, 1:], target_out[0, :-1])


def test_report_counts_every_dropped_pair(tokenizer):
    long_sentence = " ".join(["Haus"] * 80) + "."
    corpus = Corpus(
        [
            ("Das Haus.", "The house."),
            (long_sentence, "The house."),
            ("   ", "Nothing."),
            ("Ja.", "Yes."),
        ],
        skipped={"empty line": 2},
    )
    report = pipeline_report(corpus.dataset(), tokenizer, 512, 32, skipped=corpus.skipped)
    assert (report.read, report.kept) == (6, 2)
    assert report.dropped == {
        "empty line": 2,
        "empty after normalization": 1,
        "longer than max_length=32 tokens": 1,
    }
    text = str(report)
    assert "pairs read 6, kept 2, dropped 4" in text and "padding efficiency" in text
    kept = sum(
        len(t) for _, t in make_batches(corpus.dataset(), tokenizer, 512, 32).as_numpy_iterator()
    )
    assert kept == report.kept


def test_batch_sizes_are_multiples_of_the_replica_count(pairs, tokenizer):
    batches = make_batches(pairs, tokenizer, BUDGET, MAX_LENGTH, repeat=True, batch_size_multiple=4)
    for inputs, target_out in batches.take(40).as_numpy_iterator():
        assert len(target_out) % 4 == 0
        assert inputs["source"].size <= BUDGET and inputs["target"].size <= BUDGET


def test_budget_must_hold_the_smallest_batch(pairs, tokenizer):
    with pytest.raises(
        ValueError, match=r"tokens_per_batch=30 cannot hold 1 sentence\(s\) of max_length=32"
    ):
        make_batches(pairs, tokenizer, 30, 32)
    with pytest.raises(
        ValueError, match=r"cannot hold 4 sentence\(s\) of max_length=32 \(batch_size_multiple=4\)"
    ):
        make_batches(pairs, tokenizer, 100, 32, batch_size_multiple=4)


def test_bucket_boundaries_cover_max_length():
    bounds = bucket_boundaries(100)
    assert bounds[0] == 8 and bounds[-1] == 101 and bounds == sorted(set(bounds))
    assert all(b2 / b1 <= 1.15 for b1, b2 in zip(bounds[:-2], bounds[1:-1]) if b1 >= 10)


@pytest.mark.slow
def test_model_fits_on_the_batches(pairs, tokenizer):
    config = kt.TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size)
    model = kt.build_transformer(config)
    model.compile(optimizer=kt.create_optimizer(config), loss=kt.LabelSmoothedCrossEntropy())
    batches = make_batches(pairs, tokenizer, BUDGET, MAX_LENGTH, repeat=True)
    history = model.fit(batches, steps_per_epoch=3, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_static_shapes_pad_every_batch_to_its_bucket_bound(tokenizer):
    """For XLA under JAX: few batch shapes, each side padded to its bucket's bound - 1."""
    pairs = synthetic_pairs(400)
    batches = make_batches(
        Corpus(pairs).dataset(), tokenizer, 1024, 64, shuffle_buffer=0, static_shapes=True
    )
    bounds = static_boundaries(64)
    lengths = set()
    for inputs, labels in batches.as_numpy_iterator():
        length = inputs["source"].shape[1]
        assert inputs["target"].shape[1] == labels.shape[1] == length and length + 1 in bounds
        assert inputs["source"].size <= 1024
        lengths.add(length)
    assert 3 <= len(lengths) <= len(bounds) < 12 and all(n % 8 == 0 for n in lengths)
