"""Diverse beam search (`kt.DiverseBeam`, Vijayakumar et al., 2016), the search added through
the extension point: one group is beam search, a penalty makes the groups differ, its n-best
are scored as kt.score scores them, and it is served through the Translator's SavedModel."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import random_ids, run_python
from test_decoding import NO_STATE, markov_step, source_batch, strip
from test_export import OP_SCRIPT, ops_of

import keras_transformer as kt
from keras_transformer.decoding import search_over_steps
from keras_transformer.decoding.constraints import prepare
from keras_transformer.exports import read_search_settings


@pytest.mark.slow
def test_one_group_is_beam_search_exactly(number_translator):
    """One group has no group before it: its penalty never applies, whatever lambda."""
    trained, tokenizer, pairs = number_translator
    sources = source_batch(tokenizer, [de for de, _ in pairs[:6]])
    random_model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=40))
    random_sources = random_ids(np.random.default_rng(3), 4, 6, 40)
    for model, source in ((trained, sources), (random_model, random_sources)):
        beam = kt.beam_search(model, source, beam_size=4, alpha=0.6)
        for diversity in (0.0, 2.0):
            diverse = kt.run_search(model, source, kt.DiverseBeam(4, 1, diversity, alpha=0.6))
            for got, expected in zip(diverse, beam):
                np.testing.assert_array_equal(got, expected)


def test_a_penalty_makes_the_groups_first_tokens_differ():
    """Four groups of one beam: without a penalty each is the same greedy search; with one,
    each group's first token is one the groups before it did not choose."""
    table = np.random.default_rng(5).normal(scale=2.0, size=(8, 9, 9))
    limits = tf.constant([6, 8, 4])
    same, _ = search_over_steps(
        kt.DiverseBeam(4, 4, 0.0), markov_step(table), NO_STATE, 3, limits, 8
    )
    assert all(len({tuple(row) for row in hypotheses}) == 1 for hypotheses in same.numpy())
    ids, _ = search_over_steps(
        kt.DiverseBeam(4, 4, 100.0), markov_step(table), NO_STATE, 3, limits, 8
    )
    assert all(len(set(hypotheses[:, 0])) == 4 for hypotheses in ids.numpy())


def test_sentences_leave_the_batch_without_changing_the_groups_results():
    """The same n-best with and without static shapes (sentences leaving the batch). The toy
    step's log_softmax rounds the last bit differently with the number of rows, hence the
    scores' tolerance."""
    table = np.random.default_rng(6).normal(scale=2.0, size=(8, 9, 9))
    limits = tf.constant([5, 3, 7])
    search = kt.DiverseBeam(6, 3, 1.5, alpha=0.6)
    (static_ids, static_scores), (ids, scores) = (
        search_over_steps(search, markov_step(table), NO_STATE, 3, limits, 8, static_shapes=static)
        for static in (True, False)
    )
    np.testing.assert_array_equal(ids, static_ids)
    np.testing.assert_allclose(scores, static_scores, rtol=1e-6)


@pytest.mark.slow
def test_nbest_are_valid_and_scored_as_forced_decoding_scores_them(number_translator):
    """Two groups without a penalty are the same beam search twice; with a strong one the
    second group finds other hypotheses, and each scores log P / lp as kt.score has it. A
    hypothesis ends in eos or, cut by the search, at its sentence's length bound without one
    (the strong penalty can push a group onto hypotheses that never end); kt.score scores
    either as the search does, with lp counting the tokens it has."""
    model, tokenizer, pairs = number_translator
    source = source_batch(tokenizer, [de for de, _ in pairs[:3]])
    twice, _ = kt.run_search(model, source, kt.DiverseBeam(4, 2, 0.0, alpha=0.6))
    assert [len({tuple(strip(h)) for h in row}) for row in twice.numpy()] == [2, 2, 2]
    ids, scores = kt.run_search(model, source, kt.DiverseBeam(4, 2, 10.0, alpha=0.6))
    ids, scores = ids.numpy(), scores.numpy()
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first
    limits = prepare(model, source, None, extra_length=50).limits.numpy()  # run_search's
    hypotheses = ids.reshape(12, -1)
    for hypothesis, limit in zip(hypotheses, np.repeat(limits, 4)):
        tokens = strip(hypothesis)  # no pad or bos; eos at most once, last, or cut at the bound
        assert list(hypothesis[: len(tokens)]) == tokens and not hypothesis[len(tokens) :].any()
        assert 0 not in tokens and 2 not in tokens and 3 not in tokens[:-1]
        assert tokens[-1] == 3 or len(tokens) == limit, (tokens, limit)
    _, _, normalized = kt.score(model, np.repeat(source, 4, axis=0), hypotheses, 0.6)
    np.testing.assert_allclose(normalized.numpy(), scores.reshape(-1), atol=1e-4)
    assert [len({tuple(strip(h)) for h in row}) for row in ids] == [4, 4, 4]


@pytest.mark.slow
def test_settings_are_checked(number_translator):
    for settings in (dict(groups=3), dict(groups=0), dict(diversity=-1.0), dict(diversity=1e999)):
        with pytest.raises(ValueError, match="diverse beam search needs groups >= 1 dividing"):
            kt.DiverseBeam(beam_size=4, **settings)
    model, tokenizer, _ = number_translator
    translator = kt.Translator(model, tokenizer, search=kt.DiverseBeam(6, 2, 1.0))
    assert (translator.beam_size, translator.alpha, translator.nbest) == (6, 0.6, 6)
    same = kt.Translator(model, tokenizer, 6, 0.6, search=kt.DiverseBeam(6, 2, 1.0))
    assert (same.beam_size, same.alpha) == (6, 0.6)
    with pytest.raises(ValueError, match="alpha=1.0 differs from the search's: DiverseBeam"):
        kt.Translator(model, tokenizer, alpha=1.0, search=kt.DiverseBeam(6, 2, 1.0))
    with pytest.raises(ValueError, match="give either `search` or `sampling`"):
        kt.Translator(model, tokenizer, search=kt.DiverseBeam(), sampling=kt.SamplingSettings())


@pytest.mark.slow
def test_the_export_program_serves_it_and_refuses_groups_that_do_not_divide_the_beam(
    number_translator, tmp_path, capsys
):
    """`serving.export --diverse-groups 2` exports the diverse search (kt.Translator's
    `search`): the SavedModel answers as the library does, with core TensorFlow and
    tensorflow-text ops only, and records its search. Groups that do not divide the beam are
    refused naming both flags, before anything is written."""
    from serving import export

    model, tokenizer, pairs = number_translator
    model.save(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "tokenizer.model")
    argv = ["--model", str(tmp_path / "model.keras"), "--export-dir", str(tmp_path / "exports")]
    with pytest.raises(SystemExit) as exit_info:
        export.main([*argv, "--beam-size", "4", "--diverse-groups", "3"])
    assert exit_info.value.code == 1
    assert "error: --diverse-groups 3 does not divide --beam-size 4" in capsys.readouterr().err
    assert not (tmp_path / "exports").exists()
    export.main([*argv, "--diverse-groups", "2", "--diversity", "1.0"])
    version_dir = tmp_path / "exports" / "1"
    assert read_search_settings(version_dir)["search"] == repr(kt.DiverseBeam(4, 2, 1.0, 0.6))
    sentences = tf.constant([de for de, _ in pairs[:5]])
    served = tf.saved_model.load(str(version_dir)).signatures["serving_default"](
        sentences=sentences
    )
    source, _ = kt.Translator(model, tokenizer).source_ids(sentences)
    ids, scores = kt.run_search(model, source, kt.DiverseBeam(4, 2, 1.0, alpha=0.6))
    width = served["tokens"].shape[1]
    np.testing.assert_array_equal(served["tokens"], ids[:, 0, :width])
    np.testing.assert_allclose(served["nbest_scores"], scores, atol=1e-5)
    assert [t.decode() for t in served["translation"].numpy()] == [en for _, en in pairs[:5]]
    ops = ops_of(run_python("-c", OP_SCRIPT, str(version_dir)).stdout)
    assert set(ops["used"]) == set(ops["core"]) | set(ops["text"])
    assert not [op for op in ops["used"] if op.startswith("Xla") or "PyFunc" in op]
