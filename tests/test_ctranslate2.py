"""The CTranslate2 export: exact log-probabilities for every architecture option it represents,
the same greedy and beam-4 translations as our searches, the programs, and the converter's
errors."""

import json
import pathlib

import ctranslate2
import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.ctranslate2_translator import CTranslate2Translator
from serving.ctranslate2 import convert

REPO = pathlib.Path(__file__).resolve().parents[1]


def pieces_of(tokenizer, ids):
    return [tokenizer._processor.id_to_piece(int(i)) for i in ids if i not in (0, 3)]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_first": True},
        {"positional": "learned", "share_embeddings": False},
        {"key_dim": 8, "value_dim": 8},
    ],
    ids=["paper", "pre-norm", "learned-unshared", "key-dim-8"],
)
def test_converted_model_gives_our_log_probabilities(tokenizer, tmp_path, overrides):
    """CTranslate2 scores target sequences with the log-probabilities our model gives them
    (eos included), for each configuration the converter accepts."""
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_length=32, **overrides
    )
    model = kt.build_transformer(config)
    converted = convert(model, tokenizer_file(tokenizer, tmp_path), tmp_path / "ct2")
    rng = np.random.default_rng(1)
    source = rng.integers(4, tokenizer.vocab_size, (3, 6))
    target = rng.integers(4, tokenizer.vocab_size, (3, 5))
    results = ctranslate2.Translator(str(converted)).score_batch(
        [pieces_of(tokenizer, s) for s in source], [pieces_of(tokenizer, t) for t in target]
    )
    eos, bos = np.full((3, 1), 3), np.full((3, 1), 2)
    logits = model({"source": np.hstack([source, eos]), "target": np.hstack([bos, target])})
    log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(logits, axis=-1))
    ours = np.take_along_axis(log_probs, np.hstack([target, eos])[..., None], -1)[..., 0]
    np.testing.assert_allclose([r.log_probs for r in results], ours, atol=1e-4)


def source_ids_of(tokenizer, sentences):
    """The sentences' ids as the searches take them: padded, eos last."""
    ids = tokenizer.tokenize(sentences, padded=True).numpy()
    ids = np.hstack([ids, np.zeros((len(sentences), 1), "int32")])
    ids[np.arange(len(sentences)), (ids != 0).sum(1)] = 3  # eos
    return ids


def tokenizer_file(tokenizer, directory):
    return tokenizer.save(pathlib.Path(directory) / "tokenizer.model")


@pytest.fixture(scope="module")
def converted_numbers(number_translator, tmp_path_factory):
    model, tokenizer, pairs = number_translator
    directory = tmp_path_factory.mktemp("ct2")
    model_path = directory / "model.keras"
    model.save(model_path)
    tokenizer_file(tokenizer, directory)
    return model_path, convert(model, directory / "tokenizer.model", directory / "float32")


@pytest.mark.slow
def test_greedy_and_beam_translations_equal_ours(number_translator, converted_numbers):
    """On a trained model, in float32: CTranslate2's greedy ids are `greedy_search`'s, and its
    best beam-4 hypothesis under GNMT's penalty is `beam_search`'s, whose score CTranslate2's
    exact scoring (`score_batch`) gives as ours."""
    model, tokenizer, pairs = number_translator
    sources = [source for source, _ in pairs]
    source_ids = source_ids_of(tokenizer, sources)
    greedy = kt.greedy_search(model, source_ids).numpy()
    beam, scores = kt.beam_search(model, source_ids, beam_size=4, alpha=0.6)
    engine = CTranslate2Translator(converted_numbers[1], beam_size=4, alpha=0.6)
    source_pieces, _ = engine.tokenize(sources)
    ct2_greedy = engine.translator.translate_batch(source_pieces, beam_size=1)
    ct2_beam = [ranked[0] for ranked in engine.translate_pieces(source_pieces)]
    # The search's own scores are not compared: CTranslate2's CPU search takes its
    # log-softmax through vectorized approximations of exp and log (its scores differed from
    # ours by up to 3.6e-4 relative on one trained model, 1.2e-3 on another), while its
    # score_batch, as ours, is exact to float32 rounding.
    rescored = engine.translator.score_batch(source_pieces, [hyp for hyp, _ in ct2_beam])
    for i in range(len(sources)):
        assert ct2_greedy[i].hypotheses[0] == pieces_of(tokenizer, greedy[i]), sources[i]
        assert ct2_beam[i][0] == pieces_of(tokenizer, beam.numpy()[i, 0]), sources[i]
        penalty = ((5.0 + len(rescored[i].log_probs)) / 6.0) ** 0.6  # eos counted
        exact = sum(rescored[i].log_probs) / penalty
        assert exact == pytest.approx(float(scores[i, 0]), rel=1e-5), sources[i]


@pytest.mark.slow
def test_prefixed_translations_and_scores_agree_with_ours(number_translator, converted_numbers):
    """With target prefixes, CTranslate2 (float32) finds our Translator's translations (the graph
    the SavedModel exports) with their scores (the prefix's log-probabilities counted in both),
    and its score_batch gives the token log-probabilities of our score signature.

    Where the searches may part: CTranslate2's, run with length penalty 0 as
    `CTranslate2Translator` runs it, stops once its best hypothesis by log P has ended and it
    holds K ended ones, and only these are ranked by log P / lp; ours searches on log P / lp
    until nothing alive can win. In both, a hypothesis that reaches the length bound ends there
    without eos. After an improbable prefix ("nine" for "zwei ..."), near-certain repeats can
    carry ours to the bound, where lp outweighs their cost, after CTranslate2 has stopped. So a
    translation may differ only where ours scores higher and CTranslate2's is in our n-best
    with its score; every score of ours is forced decoding's of its output."""
    model, tokenizer, pairs = number_translator
    sources = [source for source, _ in pairs[:8]]
    prefixes = ["", "one", "two", "", "three four", "five", "", "nine"]
    translator = kt.Translator(model, tokenizer, beam_size=4, alpha=0.6)
    ours = translator.translate_with_prefix(tf.constant(sources), tf.constant(prefixes))
    engine = CTranslate2Translator(converted_numbers[1], beam_size=4, alpha=0.6)
    theirs = engine.translate(sources, target_prefix=prefixes)
    texts = [t.decode() for t in ours["translation"].numpy()]
    assert not any(t.cut for t in theirs)
    for text, their, prefix in zip(texts, theirs, prefixes):
        assert text.startswith(prefix) and their.text.startswith(prefix)
    _, _, forced = kt.score(model, source_ids_of(tokenizer, sources), ours["tokens"], alpha=0.6)
    np.testing.assert_allclose(forced, ours["score"], rtol=1e-5)
    nbest = [[t.decode() for t in row] for row in ours["nbest_translations"].numpy()]
    for their, text, score, n_texts, n_scores in zip(
        theirs, texts, ours["score"].numpy(), nbest, ours["nbest_scores"].numpy()
    ):
        if their.text == text:
            assert their.score == pytest.approx(float(score), rel=1e-3)
        else:  # ours outscores it, and holds it with its score
            found = float(n_scores[n_texts.index(their.text)])
            assert their.score == pytest.approx(found, rel=1e-3) and score > their.score

    scored = translator.score(tf.constant(sources), tf.constant(texts))
    for ct2, token_scores, tokens, score in zip(
        engine.score(sources, texts),
        scored["token_scores"].numpy(),
        scored["tokens"].numpy(),
        scored["score"].numpy(),
    ):
        np.testing.assert_allclose(ct2.token_scores, token_scores[tokens != 0], atol=1e-4)
        assert ct2.score == pytest.approx(float(score), abs=1e-4)


@pytest.mark.slow
def test_load_translator_opens_a_ctranslate2_folder(number_translator, converted_numbers):
    """`kt.load_translator` on a CTranslate2 folder: §6.1's beam search (4, alpha 0.6), whose
    best is our translation; its n best ranked under GNMT's penalty, best first; more than the
    beam keeps is refused."""
    _, _, pairs = number_translator
    sources, targets = [s for s, _ in pairs[:4]], [t for _, t in pairs[:4]]
    translator = kt.load_translator(converted_numbers[1])
    assert translator.description == (
        f"CTranslate2 {converted_numbers[1]} with beam search (beam 4, alpha 0.6)"
    )
    best = translator.translate(sources)
    assert [t.text for t in best] == targets
    for source, hypotheses, top in zip(sources, translator.translate(sources, n_best=4), best):
        scores = [h.score for h in hypotheses]
        assert len(hypotheses) == 4 and hypotheses[0] == top
        assert scores == sorted(scores, reverse=True)
        # each under GNMT's penalty, as forced decoding scores it (CTranslate2's search takes
        # its log-softmax through approximations: test_greedy_and_beam_translations_equal_ours)
        rescored = translator.score([source] * 4, [h.text for h in hypotheses])
        assert scores == pytest.approx([s.score for s in rescored], rel=2e-3)
    prefixed = translator.translate(sources[:2], n_best=2, target_prefix=["zero", ""])
    assert all(h.text.startswith("zero ") for h in prefixed[0])
    assert prefixed[1][0].text == best[1].text  # an empty prefix: none
    with pytest.raises(ValueError, match=r"n_best 5: CTranslate2 .* keeps the 4 best"):
        translator.translate(sources, n_best=5)
    greedy = kt.load_translator(converted_numbers[1], beam_size=1)
    assert [t.text for t in greedy.translate(sources)] == targets


@pytest.mark.slow
def test_programs_convert_to_int8_and_translate(
    number_translator, converted_numbers, tmp_path, capsys
):
    """`serving.ctranslate2` writes an int8 model from a .keras file (its tokenizer found beside
    it); `training.evaluate` scores it and `serving.translate` (which finds model.bin) translates
    the held-out sentences, in int8 and float32."""
    from serving import ctranslate2, translate
    from training import evaluate

    _, _, pairs = number_translator
    model_path, float32 = converted_numbers
    out = tmp_path / "int8"
    ctranslate2.main(["--model", str(model_path), "--output", str(out), "--quantization", "int8"])
    assert f"converted {model_path} to {out} (int8)" in capsys.readouterr().out
    assert (out / "model.bin").stat().st_size < (float32 / "model.bin").stat().st_size / 2
    (tmp_path / "de.txt").write_text("".join(f"{source}\n" for source, _ in pairs))
    (tmp_path / "en.txt").write_text("".join(f"{target}\n" for _, target in pairs))
    evaluate.main([
        "--model", str(out), "--source", str(tmp_path / "de.txt"),
        "--reference", str(tmp_path / "en.txt"), "--output", str(tmp_path / "hyp.txt"),
    ])  # fmt: skip
    evaluated = capsys.readouterr()
    assert f"CTranslate2 {out} with beam search (beam 4, alpha 0.6)" in evaluated.err
    assert "BLEU = 100.00" in evaluated.out
    for directory in (float32, out):
        translate.main(["--model", str(directory), *[source for source, _ in pairs]])
        translated = capsys.readouterr().out
        assert translated.splitlines() == [target for _, target in pairs], directory


def test_converter_errors_name_the_field(tokenizer, tmp_path, capsys):
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=tokenizer.vocab_size, key_dim=16, value_dim=8
    )
    path = tokenizer_file(tokenizer, tmp_path)
    with pytest.raises(ValueError, match="value_dim=8 differs from key_dim=16"):
        convert(kt.build_transformer(config), path, tmp_path / "out")
    other = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=500))
    with pytest.raises(
        ValueError, match=f"has {tokenizer.vocab_size} pieces but the model's vocab_size is 500"
    ):
        convert(other, path, tmp_path / "out")
    (tmp_path / "taken").mkdir()
    model = kt.build_transformer(
        kt.TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size)
    )
    with pytest.raises(FileExistsError, match="taken exists"):
        convert(model, path, tmp_path / "taken")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken", "tokenizer.model"]


@pytest.fixture(scope="module")
def three_engines(number_translator, converted_numbers, tmp_path_factory):
    """The number model as each --model kind: .keras (tokenizer beside), SavedModel, CTranslate2."""
    from keras_transformer_cli.versions import export_for_serving

    model, tokenizer, _ = number_translator
    base = tmp_path_factory.mktemp("lengths") / "numbers"
    translator = kt.Translator(model, tokenizer, beam_size=2, extra_length=3)
    saved = export_for_serving(translator, base)
    return {
        "keras": converted_numbers[0],
        "saved_model": saved,
        "ctranslate2": converted_numbers[1],
    }


LONG = " ".join(["eins zwei drei vier fünf"] * 10)  # 50 words: beyond the model's 32 positions


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["keras", "saved_model", "ctranslate2"])
def test_inputs_longer_than_the_model_holds_are_refused_in_every_engine(
    three_engines, kind, tmp_path, capsys
):
    """A source, a target prefix or a scored target the model cannot hold whole is refused,
    naming where it came from and the limit (31 pieces and eos: max_length 32), never cut
    silently; what fits is translated and scored as before."""
    from serving import score, translate

    model = str(three_engines[kind])
    search = [] if kind == "saved_model" else ["--beam-size", "2", "--extra-length", "3"]
    (tmp_path / "src").write_text(f"eins zwei\n{LONG}\n")
    (tmp_path / "tgt").write_text(f"one two\n{LONG.replace('eins', 'one')}\n")
    for program, argv, message in (
        (translate, ["--source", str(tmp_path / "src")], f"--source {tmp_path / 'src'}:2 is longer "
         "than the model holds (31 subword pieces and eos); nothing was written"),
        (translate, ["eins", LONG], "sentence 2 of the arguments is longer than the model holds"),
        (translate, ["--target-prefix", LONG, "eins"], "--target-prefix is longer than the model "
         "holds (31 subword pieces and eos); give a shorter one"),
        (score, ["--source", str(tmp_path / "src"), "--target", str(tmp_path / "tgt")], f"--source "
         f"{tmp_path / 'src'}:2 is longer than the model holds"),
    ):  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            program.main(["--model", model, *(search if program is translate else []), *argv])
        captured = capsys.readouterr()
        assert exit_info.value.code == 1 and message in captured.err and captured.out == ""
    (tmp_path / "src").write_text("eins zwei\ndrei\n")
    (tmp_path / "tgt").write_text(f"one two\n{'one ' * 40}\n")
    with pytest.raises(SystemExit):  # a target alone too long
        score.main(["--model", model, "--source", str(tmp_path / "src"), "--target",
                    str(tmp_path / "tgt")])  # fmt: skip
    assert f"--target {tmp_path / 'tgt'}:2 is longer than the model holds" in (
        capsys.readouterr().err
    )
    prefix = "one two three four five six seven eight nine one two three four"  # 13 words
    translate.main(["--model", model, *search, "--target-prefix", prefix, "eins"])
    assert capsys.readouterr().out.startswith(prefix)  # whole, beyond the source's length + 3


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["keras", "saved_model", "ctranslate2"])
def test_evaluation_translates_long_sources_cut_and_says_which(
    three_engines, kind, tmp_path, capsys
):
    """A test set's score covers every reference: training.evaluate translates a source
    beyond the model as far as the model holds it, and says so (console and scores.json)."""
    from training import evaluate

    (tmp_path / "src").write_text(f"eins zwei\n{LONG}\n")
    (tmp_path / "ref").write_text(f"one two\n{LONG.replace('eins', 'one')}\n")
    output = tmp_path / "out.txt"
    evaluate.main([
        "--model", str(three_engines[kind]), "--source", str(tmp_path / "src"),
        "--reference", str(tmp_path / "ref"), "--output", str(output),
        *([] if kind == "saved_model" else ["--beam-size", "2", "--extra-length", "3"]),
    ])  # fmt: skip
    assert "1 of 2 sources are longer than the model holds and were translated cut to it: " in (
        capsys.readouterr().out
    )
    assert json.loads(output.with_name("out.txt.scores.json").read_text())["sources_cut"] == [2]
    assert len(output.read_text().splitlines()) == 2
