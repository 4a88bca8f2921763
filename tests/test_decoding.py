"""§6.1 decoding: greedy and beam search with the incremental cache."""

import itertools

import numpy as np
import pytest
import tensorflow as tf
from conftest import random_ids

import keras_transformer as kt
from keras_transformer.decoding import NEG_INF, Beam, Greedy, StepState, search_over_steps, top_k

NO_STATE = StepState((), ())  # the toy decoders keep no state

EOS = 3


def source_batch(tokenizer, sentences, model=None):
    model = model or kt.build_transformer(
        kt.TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size)
    )
    return kt.Translator(model, tokenizer).source_ids(tf.constant(sentences))[0].numpy()


def strip(ids):
    """Tokens up to and including eos."""
    ids = list(ids)
    return ids[: ids.index(EOS) + 1] if EOS in ids else [t for t in ids if t]


@pytest.mark.slow
def test_cached_greedy_equals_uncached(number_translator):
    model, tokenizer, pairs = number_translator
    source = source_batch(tokenizer, [de for de, _ in pairs[:8]])
    cached = kt.greedy_search(model, source).numpy()
    assert all(len(strip(row)) > 3 for row in cached)  # real translations, not an early eos
    np.testing.assert_array_equal(cached, kt.greedy_search(model, source, use_cache=False).numpy())
    random_model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=50))
    random_source = random_ids(np.random.default_rng(0), 3, 6, 50)
    np.testing.assert_array_equal(
        kt.greedy_search(random_model, random_source, max_length=12),
        kt.greedy_search(random_model, random_source, max_length=12, use_cache=False),
    )


@pytest.mark.slow
def test_greedy_translates_the_task(number_translator):
    model, tokenizer, pairs = number_translator
    ids = kt.greedy_search(model, source_batch(tokenizer, [de for de, _ in pairs]))
    assert [t.decode() for t in tokenizer.detokenize(ids).numpy()] == [en for _, en in pairs]


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_size_one_is_greedy(number_translator, alpha):
    model, tokenizer, pairs = number_translator
    source = source_batch(tokenizer, [de for de, _ in pairs[:6]])
    ids, _ = kt.beam_search(model, source, beam_size=1, alpha=alpha)
    np.testing.assert_array_equal(ids[:, 0], kt.greedy_search(model, source))
    random_model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=30))
    random_source = random_ids(np.random.default_rng(2), 4, 6, 30)
    ids, _ = kt.beam_search(random_model, random_source, beam_size=1, alpha=alpha, max_length=10)
    np.testing.assert_array_equal(
        ids[:, 0], kt.greedy_search(random_model, random_source, max_length=10)
    )


@pytest.mark.slow
def test_beam_scores_are_the_models_log_probability_over_the_penalty(number_translator):
    """kt.score (forced decoding, the whole target at once) gives every hypothesis of the n-best
    list the score beam search (step by step, with the cache) reported for it."""
    model, tokenizer, pairs = number_translator
    source = source_batch(tokenizer, [de for de, _ in pairs[:3]])
    ids, scores = kt.beam_search(model, source, beam_size=4, alpha=0.6)
    ids, scores = ids.numpy(), scores.numpy()
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first
    hypotheses = ids.reshape(12, -1)
    tokens, sums, normalized = kt.score(model, np.repeat(source, 4, axis=0), hypotheses, 0.6)
    np.testing.assert_allclose(normalized.numpy(), scores.reshape(-1), atol=1e-4)
    for row, hypothesis in zip(tokens.numpy(), hypotheses):  # the sums add up the real tokens
        real = [i for i, token in enumerate(hypothesis) if token]
        assert np.all(row[len(real) :] == 0) and np.all(row[real] < 0)
    np.testing.assert_allclose(sums.numpy(), tokens.numpy().sum(axis=1), rtol=1e-6)


@pytest.mark.slow
def test_score_is_padding_invariant(number_translator):
    """A pair scores the same alone and in a padded batch; without alpha, two outputs."""
    model, tokenizer, pairs = number_translator
    sources = source_batch(tokenizer, [pairs[0][0], pairs[1][0] + " " + pairs[2][0]])
    targets = kt.greedy_search(model, sources).numpy()
    together, sums = kt.score(model, sources, targets)
    alone, _ = kt.score(model, sources[:1, : (sources[0] != 0).sum()], strip_batch(targets[:1]))
    np.testing.assert_allclose(together.numpy()[0, : alone.shape[1]], alone.numpy()[0], atol=1e-5)
    assert sums.shape == (2,)


def strip_batch(ids):
    """ids [B, L] cut to the batch's longest row."""
    return ids[:, : max(len(strip(row)) for row in ids)]


@pytest.mark.slow
def test_padding_in_the_batch_does_not_change_a_translation(number_translator):
    model, tokenizer, pairs = number_translator
    alone = kt.beam_search(model, source_batch(tokenizer, [pairs[0][0]]))[0].numpy()[0, 0]
    batch = source_batch(tokenizer, [pairs[0][0], pairs[1][0] + " " + pairs[2][0]])
    together = kt.beam_search(model, batch)[0].numpy()[0, 0]
    assert strip(alone) == strip(together)


@pytest.mark.slow
def test_target_prefix_starts_every_output_and_counts_in_the_score(number_translator):
    """Greedy search, beam search (every hypothesis) and sampling start with each sentence's
    prefix and go on; a prefix of zeros changes nothing; greedy search given the start of its
    own translation finds that translation; beam search scores a prefixed hypothesis as
    kt.score does, so the prefix's own log-probabilities count."""
    model, tokenizer, pairs = number_translator
    source = source_batch(tokenizer, [de for de, _ in pairs[:4]])
    greedy = kt.greedy_search(model, source).numpy()
    ids, scores = kt.beam_search(model, source)
    zeros = np.zeros((4, 3), "int32")
    np.testing.assert_array_equal(kt.greedy_search(model, source, target_prefix=zeros), greedy)
    for given, unprefixed in zip(kt.beam_search(model, source, target_prefix=zeros), (ids, scores)):
        np.testing.assert_array_equal(given, unprefixed)
    np.testing.assert_array_equal(
        kt.greedy_search(model, source, target_prefix=greedy[:, :2]), greedy
    )
    prefix = np.zeros((4, 3), "int32")  # other sentences' starts, 2, 1, 3 and 0 tokens long
    prefix[0, :2], prefix[1, :1], prefix[2, :3] = greedy[1, :2], greedy[2, :1], greedy[3, :3]
    beam, beam_scores = kt.beam_search(model, source, target_prefix=prefix)
    sampled, _ = kt.sample(model, source, seed=1, target_prefix=prefix)
    outputs = [kt.greedy_search(model, source, target_prefix=prefix).numpy(), sampled.numpy()]
    outputs += list(np.swapaxes(beam.numpy(), 0, 1))
    for output in outputs:
        for row, start in zip(output, prefix):
            start = [token for token in start if token]
            assert strip(row)[: len(start)] == start and len(strip(row)) > len(start)
    assert not np.array_equal(outputs[0], greedy)
    real = beam_scores.numpy().reshape(-1) > -1e8
    hypotheses = beam.numpy().reshape(16, -1)[real]
    _, _, normalized = kt.score(model, np.repeat(source, 4, axis=0)[real], hypotheses, 0.6)
    np.testing.assert_allclose(normalized, beam_scores.numpy().reshape(-1)[real], atol=1e-4)


def markov_step(table):
    """A toy decoder: log-probabilities depend on the position and the previous token only."""
    table = tf.constant(table, tf.float32)

    def step(tokens, state, t):
        return tf.nn.log_softmax(tf.gather(table[t], tokens)), state

    return step


def brute_force_best(table, limit, alpha):
    """The highest log P(Y) / lp(Y) over every output of at most `limit` tokens."""
    vocab = table.shape[-1]
    log_probs = table - np.log(np.exp(table).sum(-1, keepdims=True))
    best, best_tokens = -np.inf, None
    allowed = [v for v in range(vocab) if v not in (0, 2)]
    for length in range(1, limit + 1):
        for tokens in itertools.product(allowed, repeat=length):
            if EOS in tokens[:-1] or (tokens[-1] != EOS and length < limit):
                continue
            previous = (2,) + tokens[:-1]
            total = sum(log_probs[t, p, y] for t, (p, y) in enumerate(zip(previous, tokens)))
            score = total / ((5 + length) / 6) ** alpha
            if score > best:
                best, best_tokens = score, list(tokens)
    return best, best_tokens


@pytest.mark.parametrize("seed", range(4))
def test_beam_search_finds_the_best_hypothesis_by_brute_force(seed):
    limit, vocab, alpha = 4, 6, 0.6
    table = np.random.default_rng(seed).normal(scale=2.0, size=(limit, vocab, vocab))
    best, best_tokens = brute_force_best(table, limit, alpha)
    # 4 allowed tokens (no pad, no bos): a beam of 4^3 never prunes a prefix.
    ids, scores = search_over_steps(
        Beam(beam_size=64, alpha=alpha),
        markov_step(table),
        NO_STATE,
        1,
        tf.constant([limit]),
        limit,
    )
    assert strip(ids.numpy()[0, 0]) == best_tokens
    assert float(scores[0, 0]) == pytest.approx(best, abs=1e-4)


def test_sentences_leave_the_batch_without_changing_any_result():
    """Without static shapes an ended sentence leaves the batch (here at steps 3, 5 and 7, out
    of order): every sentence's n-best and greedy output equal those of the static search,
    which computes the whole batch to the end, and those of the sentence searched alone."""
    table = np.random.default_rng(7).normal(scale=2.0, size=(8, 9, 9))
    limits = tf.constant([5, 3, 7])
    searches = {
        static: (
            search_over_steps(
                Beam(3, 0.6), markov_step(table), NO_STATE, 3, limits, 8, None, None, static
            ),
            search_over_steps(
                Greedy(), markov_step(table), NO_STATE, 3, limits, 8, static_shapes=static
            ),
        )
        for static in (True, False)
    }
    for dynamic, static in zip(tf.nest.flatten(searches[False]), tf.nest.flatten(searches[True])):
        np.testing.assert_array_equal(dynamic, static)
    for b in range(3):
        alone = search_over_steps(
            Beam(3, 0.6), markov_step(table), NO_STATE, 1, limits[b : b + 1], 8
        )
        np.testing.assert_array_equal(alone[0][0], searches[False][0][0][b])
        np.testing.assert_array_equal(alone[1][0], searches[False][0][1][b])


@pytest.mark.parametrize("ties", [False, True])
def test_blocked_top_k_equals_top_k(ties):
    """Beam search's top_k (the best blocks of columns first) gives tf.math.top_k's values and
    indices, the lower index first among equal values, also when the columns do not fill the
    last block."""
    x = np.random.default_rng(8).normal(size=(5, 4 * 1001)).astype("float32")
    if ties:
        x = np.round(x)  # a few distinct values, each thousands of times
        x[1] = 0.0
    values, indices = top_k(tf.constant(x), 8)
    expected = tf.math.top_k(x, 8)
    np.testing.assert_array_equal(values, expected.values)
    np.testing.assert_array_equal(indices, expected.indices)


@pytest.mark.parametrize("columns", [5, 1001, 2048])
def test_top_k_of_offset_rows_equals_top_k_of_their_sums(columns):
    """Beam search's candidates (a hypothesis's score less its normaliser, plus a token's
    logit) ranked without forming them: the values and indices of tf.math.top_k over the sums
    flattened, ties (rounded logits and scores), impossible tokens, empty beams and one beam
    holding all of a sentence's best included, blocked or not."""
    rng = np.random.default_rng(columns)
    x = np.round(rng.normal(scale=3.0, size=(6, 4, columns)), 1).astype("float32")
    x[:, :, [0, 2]] += NEG_INF
    x[1, 2, np.arange(columns) != 4] += NEG_INF  # a forced token
    offsets = np.round(rng.normal(-3.0, 1.0, size=(6, 4)), 1).astype("float32")
    offsets[0, 1:] = NEG_INF
    offsets[2, 1:] -= 30.0
    values, indices = top_k(tf.constant(x), 8, offsets=tf.constant(offsets))
    sums = tf.reshape(offsets[:, :, None] + x, [6, -1])
    expected = tf.math.top_k(sums, 8)
    np.testing.assert_array_equal(values, expected.values)
    np.testing.assert_array_equal(indices, expected.indices)
    if columns > 8 + 2:  # sentence 2's 8 best all extend its beam 0
        assert (indices.numpy()[2] < columns).all()


def test_early_termination_never_cuts_a_better_alive_hypothesis():
    """[eos] finishes first, but the longer [a c eos] scores higher under the length penalty."""
    limit, vocab = 6, 6
    table = np.full((limit, vocab, vocab), -50.0)
    table[0, 2, [1, 3, 4]] = np.log([0.5, 0.3, 0.2])  # bos -> a .5, eos .3, b .2
    table[1, 1, [3, 5]] = np.log([0.5, 0.5 - 1e-6])  # a -> eos, c
    table[1, 4, [3, 5]] = np.log([0.5, 0.5])  # b -> eos, c
    table[2:, :, 3] = np.log(1 - 1e-6)  # then eos
    ids, scores = search_over_steps(
        Beam(beam_size=2, alpha=0.6), markov_step(table), NO_STATE, 1, tf.constant([limit]), limit
    )
    assert strip(ids.numpy()[0, 0]) == [1, 5, 3]
    assert float(scores[0, 0]) == pytest.approx(brute_force_best(table, limit, 0.6)[0], abs=1e-4)


def test_each_sentence_stops_at_its_own_bound():
    table = np.zeros((20, 6, 6))
    table[:, :, EOS] = -30.0  # eos is (almost) never chosen
    limits = tf.constant([3, 7])
    tokens = search_over_steps(Greedy(), markov_step(table), NO_STATE, 2, limits, 20)[0][:, 0]
    assert [len(strip(row)) for row in tokens.numpy()] == [3, 7]
    ids, _ = search_over_steps(
        Beam(beam_size=3, alpha=0.6), markov_step(table), NO_STATE, 2, limits, 20
    )
    assert [len(strip(row)) for row in ids.numpy()[:, 0]] == [3, 7]


def test_output_is_bounded_by_source_length_plus_extra():
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=40))
    source = random_ids(np.random.default_rng(1), 2, 5, 40)
    source[1, 3:] = 0
    ids = kt.greedy_search(model, source, extra_length=4).numpy()
    assert ids.shape[1] == 5 + 4
    assert len(strip(ids[1])) <= 3 + 4
    assert kt.beam_search(model, source, extra_length=4)[0].shape[-1] == 9


@pytest.mark.slow
def test_decoding_compiles_with_xla(number_translator):
    model, tokenizer, pairs = number_translator
    source = source_batch(tokenizer, [de for de, _ in pairs[:4]])
    compiled = kt.greedy_search(model, source, max_length=16, jit_compile=True)
    np.testing.assert_array_equal(compiled, kt.greedy_search(model, source, max_length=16))
    ids, scores = kt.beam_search(model, source, max_length=16, jit_compile=True)
    expected_ids, expected_scores = kt.beam_search(model, source, max_length=16)
    np.testing.assert_array_equal(ids[:, 0], expected_ids[:, 0])
    np.testing.assert_allclose(scores, expected_scores, atol=1e-4)


def test_a_non_empty_source_never_gets_an_empty_translation():
    """eos is the likeliest first token of both sentences; sentence 0 (a real source, min
    length 1) must emit something first, sentence 1 (an empty source, min length 0) may end."""
    table = np.zeros((6, 6, 6))
    table[:, :, EOS] = 3.0
    min_lengths, limits = tf.constant([1, 0]), tf.constant([6, 6])
    tokens = search_over_steps(Greedy(), markov_step(table), NO_STATE, 2, limits, 6, min_lengths)[
        0
    ][:, 0]
    assert [len(strip(row)) for row in tokens.numpy()] == [2, 1]  # one token then eos; eos
    ids, scores = search_over_steps(
        Beam(3, 0.6), markov_step(table), NO_STATE, 2, limits, 6, min_lengths
    )
    assert [len(strip(row)) for row in ids.numpy()[:, 0]] == [2, 1]
    assert np.isfinite(scores.numpy()[:, 0]).all()
    # Through the public functions, with a model whose every output is eos: the last decoder
    # layer's norm gives the constant beta (gamma 0), and eos's embedding points along it.
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=40))
    norm = model.decoder.layers[-1].feed_forward_norm
    beta = np.random.default_rng(0).normal(size=norm.beta.shape).astype("float32")
    norm.gamma.assign(np.zeros_like(beta))
    norm.beta.assign(beta)
    embeddings = model.embedding.target_embeddings.numpy()
    embeddings[EOS] = 10 * beta / np.linalg.norm(beta)
    model.embedding.target_embeddings.assign(embeddings)
    source = np.array([[5, 6, EOS], [EOS, 0, 0]], "int32")  # a sentence, and the empty one

    def beam(model, source, **settings):
        return kt.beam_search(model, source, **settings)[0][:, 0]

    for search in (kt.greedy_search, beam):
        assert [len(strip(row)) for row in search(model, source, max_length=6).numpy()] == [2, 1]
        empty = search(model, source, max_length=6, min_length=0).numpy()
        assert [len(strip(row)) for row in empty] == [1, 1]
