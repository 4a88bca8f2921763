"""The shared subword vocabulary, applied inside the TensorFlow graph."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_transformer import SubwordTokenizer
from keras_transformer.text import normalize_text
from keras_transformer.tokenizer import MODEL_TYPES

SAMPLES = [
    "Guten Morgen, wie geht's?",
    "Two  spaces,\ttabs and trailing space ",
    "UPPER lower MiXeD 1234567890 !?.,;:()[]{}\"'-",
    "Grüße aus Köln: Straße, Maß, Äpfel.",
    "日本語のテキスト、中文文本, русский текст, ελληνικά, עברית, العربية",
    "emoji 😀👍🏽🇩🇪 and ZWJ 👩‍💻",
    "ﬁ ligature, ① circled, full-width ＡＢＣ",  # NFKC changes these
    "   leading whitespace",
    "▁ sentencepiece's ▁word boundary▁mark",
    "",
]


def test_special_ids(tokenizer):
    assert [tokenizer.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tokenizer.model_type == "bpe"  # the default, as §5.1
    assert tokenizer.vocab_size <= 400


@pytest.mark.parametrize("text", SAMPLES)
def test_detokenize_inverts_tokenize_on_normalized_text(tokenizer, text):
    ids = tokenizer.tokenize(tf.constant([text]))
    assert not np.any(ids.flat_values.numpy() == 1), "byte fallback: nothing becomes <unk>"
    restored = tokenizer.detokenize(ids).numpy()[0].decode("utf-8")
    assert restored == normalize_text(text)
    assert tokenizer.normalize(tf.constant([text])).numpy()[0].decode("utf-8") == normalize_text(
        text
    )


def test_invalid_utf8_is_replaced_not_an_error(tokenizer):
    ids = tokenizer.tokenize(tf.constant([b"caf\xc3 ok \xff"]))
    assert tokenizer.detokenize(ids).numpy()[0].decode("utf-8") == "caf\ufffd ok \ufffd"


def test_ragged_and_padded_batches(tokenizer):
    batch = tf.constant(["Das Haus ist groß.", "Ja.", ""])
    ragged = tokenizer.tokenize(batch)
    padded = tokenizer.tokenize(batch, padded=True)
    assert isinstance(ragged, tf.RaggedTensor) and ragged.shape[0] == 3
    assert padded.dtype == tf.int32 and padded.shape == (3, int(ragged.row_lengths().numpy().max()))
    np.testing.assert_array_equal(padded.numpy(), ragged.to_tensor().numpy())
    assert padded.numpy()[2].sum() == 0
    np.testing.assert_array_equal(
        tokenizer.detokenize(padded).numpy(), tokenizer.detokenize(ragged).numpy()
    )


def test_detokenize_drops_specials_and_stops_at_eos(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["Das Haus."]), padded=True).numpy()[0]
    with_specials = np.concatenate([[2], ids, [3], ids, [0, 0]])[None]
    assert tokenizer.detokenize(with_specials).numpy()[0].decode() == "Das Haus."


def test_one_vocabulary_for_both_languages(tokenizer):
    pieces = {tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)}
    assert {"▁Haus", "▁house", "▁Katze", "▁cat"} <= pieces  # whole words of both languages
    german = tokenizer.tokenize(tf.constant(["Haus Straße"])).flat_values.numpy()
    english = tokenizer.tokenize(tf.constant(["house street"])).flat_values.numpy()
    assert german.max() < tokenizer.vocab_size and english.max() < tokenizer.vocab_size
    assert len(german) <= 4 and len(english) <= 4  # whole words, not byte fallback


def test_survives_keras_set_random_seed(tokenizer):
    """Seeding clears TensorFlow's kernel cache; the tokenizer's model resource survives it."""
    import keras

    before = tokenizer.tokenize(tf.constant(["Das Haus."]), padded=True).numpy()
    keras.utils.set_random_seed(99)
    np.testing.assert_array_equal(
        tokenizer.tokenize(tf.constant(["Das Haus."]), padded=True).numpy(), before
    )


def test_save_load_round_trip(tokenizer, tmp_path):
    loaded = SubwordTokenizer.load(tokenizer.save(tmp_path / "copy.model"))
    batch = tf.constant(SAMPLES)
    np.testing.assert_array_equal(
        loaded.tokenize(batch, padded=True).numpy(), tokenizer.tokenize(batch, padded=True).numpy()
    )


def test_model_travels_inside_a_saved_model(tokenizer, tmp_path):
    model_file = tmp_path / "only.model"
    tokenizer.save(model_file)

    class Wrapper(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer = SubwordTokenizer.load(model_file)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def roundtrip(self, text):
            ids = self.tokenizer.tokenize(text, padded=True)
            return {"ids": ids, "text": self.tokenizer.detokenize(ids)}

    tf.saved_model.save(Wrapper(), str(tmp_path / "saved"))
    model_file.unlink()
    script = textwrap.dedent(
        f"""
        import tensorflow as tf, tensorflow_text  # noqa: F401 (registers the ops)
        loaded = tf.saved_model.load({str(tmp_path / "saved")!r})
        out = loaded.roundtrip(tf.constant(["Grüße 😀", "Das Haus."]))
        print(repr([t.decode() for t in out["text"].numpy()]))
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip().splitlines()[-1] == repr(["Grüße 😀", "Das Haus."])


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="vocab_size must be at least 261"):
        SubwordTokenizer.train(["a b c"], vocab_size=100, path=tmp_path / "x.model")
    with pytest.raises(FileNotFoundError, match="no sentencepiece model at .*missing.model"):
        SubwordTokenizer.load(tmp_path / "missing.model")


def test_bpe_dropout_samples_segmentations_of_the_same_text(tokenizer):
    """`sampling(p)` draws a new segmentation at every call (BPE-dropout), each of which
    detokenizes to the normalized text; the tokenizer itself keeps sentencepiece's one
    segmentation, exactly as sentencepiece's own deterministic encoder gives it."""
    sampled = tokenizer.sampling(0.3)
    texts = [text for text in SAMPLES if normalize_text(text)]
    draws = [sampled.tokenize(tf.constant(texts)) for _ in range(6)]
    for draw in draws:
        restored = [s.decode("utf-8") for s in tokenizer.detokenize(draw).numpy()]
        assert restored == [normalize_text(text) for text in texts]
        assert not np.any(draw.flat_values.numpy() == 1)  # no <unk>: byte fallback still holds
    segmentations = {tuple(map(tuple, draw.to_list())) for draw in draws}
    assert len(segmentations) == len(draws)  # every draw differs
    plain = tokenizer.tokenize(tf.constant(texts)).to_list()
    encoder = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    assert plain == [encoder.encode(normalize_text(text)) for text in texts]
    assert all(tokenizer.tokenize(tf.constant(texts)).to_list() == plain for _ in range(3))
    for dropout in (0.0, 1.0):
        with pytest.raises(ValueError, match="BPE-dropout must be in"):
            tokenizer.sampling(dropout)


def test_unigram_vocabulary_samples_from_its_segmentations(tmp_path):
    """A unigram vocabulary (Kudo, 2018) segments deterministically as sentencepiece's own
    encoder does; `sampling(alpha)` draws segmentations that differ and detokenize to the
    normalized text. Training refuses a model type it does not know."""
    from conftest import synthetic_pairs

    texts = [side for pair in synthetic_pairs(400) for side in pair]
    unigram = SubwordTokenizer.train(texts, 400, tmp_path / "unigram.model", model_type="unigram")
    assert unigram.model_type == "unigram"
    assert SubwordTokenizer.load(tmp_path / "unigram.model").model_type == "unigram"
    samples = [text for text in SAMPLES if normalize_text(text)]
    plain = unigram.tokenize(tf.constant(samples)).to_list()
    encoder = sentencepiece.SentencePieceProcessor(model_proto=unigram.model_proto)
    assert plain == [encoder.encode(normalize_text(text)) for text in samples]
    sampled = unigram.sampling(0.2)
    draws = [sampled.tokenize(tf.constant(samples)) for _ in range(6)]
    for draw in draws:
        restored = [s.decode("utf-8") for s in unigram.detokenize(draw).numpy()]
        assert restored == [normalize_text(text) for text in samples]
        assert not np.any(draw.flat_values.numpy() == 1)  # no <unk>: byte fallback still holds
    # Unseeded draws: two may coincide (a short text has few segmentations), not all six.
    assert len({tuple(map(tuple, draw.to_list())) for draw in draws}) > 1
    assert all(unigram.tokenize(tf.constant(samples)).to_list() == plain for _ in range(3))
    with pytest.raises(ValueError, match="unigram sampling's alpha must be in"):
        unigram.sampling(1.0)
    with pytest.raises(ValueError, match="model_type must be one of bpe, unigram; got 'char'"):
        SubwordTokenizer.train(texts, 400, tmp_path / "char.model", model_type="char")
    # The training program offers the kinds the tokenizer trains.
    from training import train

    [flag] = [a for a in train.build_parser()._actions if a.dest == "subword_model"]
    assert tuple(flag.choices) == MODEL_TYPES


def test_symbols_are_one_piece_wherever_they_occur(tmp_path):
    """A symbol such as the phrase tag is one piece, in the texts it was trained on and in new
    ones, and detokenizes back to itself; without it, its punctuation and letters split."""
    from conftest import synthetic_pairs

    texts = [f"<phrase> {side}" for pair in synthetic_pairs(200) for side in pair]
    tagged = SubwordTokenizer.train(texts, 400, tmp_path / "tagged.model", symbols=["<phrase>"])
    plain = SubwordTokenizer.train(texts, 400, tmp_path / "plain.model")
    for text in ("<phrase> Das Haus.", "Das <phrase> Haus."):
        ids = tagged.tokenize(tf.constant([text])).to_list()[0]
        assert [tagged.id_to_piece(i) for i in ids].count("<phrase>") == 1
        assert tagged.detokenize(tf.ragged.constant([ids])).numpy()[0].decode() == text
        split = plain.tokenize(tf.constant([text])).to_list()[0]
        assert "<phrase>" not in [plain.id_to_piece(i) for i in split]
