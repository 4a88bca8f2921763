"""A model knows its tokenizer: its config records the SHA-256 of the sentencepiece model its ids
come from, and the Translator, the CTranslate2 converter and the programs refuse another
vocabulary of the same size (which would translate into nonsense)."""

import keras
import pytest

import keras_transformer as kt
from keras_transformer.data.binarized import sha256_of

VOCAB_SIZE = 290
FOREIGN = "is not the one the model was trained with"
REMEDY = "give the tokenizer the model was trained with (the run directory's tokenizer.model)"


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """(A, B): two vocabularies of VOCAB_SIZE pieces trained on different words."""
    directory = tmp_path_factory.mktemp("tokenizers")
    words = {
        "a": "one two three four five six seven eight nine ten",
        "b": "eins zwei drei vier fünf sechs sieben acht neun zehn",
    }
    trained = tuple(
        kt.SubwordTokenizer.train([text] * 20, VOCAB_SIZE, directory / f"{name}.model")
        for name, text in words.items()
    )
    assert [t.vocab_size for t in trained] == [VOCAB_SIZE, VOCAB_SIZE]
    return trained


def tiny_config(tokenizer_sha256):
    shape = dict(num_layers=1, d_model=32, num_heads=2, d_ff=64, max_length=32)
    return kt.TransformerConfig.preset(
        "tiny", vocab_size=VOCAB_SIZE, tokenizer_sha256=tokenizer_sha256, **shape
    )


@pytest.fixture(scope="module")
def model_of_a(tokenizers):
    """A tiny untrained model whose config records tokenizer A."""
    return kt.build_transformer(tiny_config(tokenizers[0].sha256))


def test_a_tokenizer_s_sha256_is_its_file_s(tokenizers):
    a, b = tokenizers
    assert a.sha256 == sha256_of(a.path) and b.sha256 == sha256_of(b.path)
    assert a.sha256 != b.sha256
    loaded = kt.SubwordTokenizer.load(a.path)
    assert (loaded.sha256, loaded.path) == (a.sha256, a.path)
    assert kt.SubwordTokenizer(a.model_proto).path is None


def test_the_translator_refuses_another_vocabulary_of_the_same_size(tokenizers, model_of_a):
    a, b = tokenizers
    kt.Translator(model_of_a, a)
    with pytest.raises(ValueError) as refused:
        kt.Translator(model_of_a, b)
    message = str(refused.value)
    assert message.startswith(f"{b.path}: the tokenizer {FOREIGN} (SHA-256 {b.sha256[:12]}...")
    assert f"the model's config records {a.sha256[:12]}..." in message
    assert message.endswith(REMEDY) and "\n" not in message


def test_a_config_without_the_sha256_accepts_any_tokenizer_of_its_size(tokenizers):
    a, b = tokenizers
    kt.Translator(kt.build_transformer(tiny_config(None)), b)
    larger = kt.TransformerConfig.preset("tiny", vocab_size=VOCAB_SIZE + 10)
    with pytest.raises(ValueError, match=f"has {VOCAB_SIZE} pieces but the model's vocab_size"):
        larger.check_tokenizer(a)


def test_the_sha256_survives_the_config_and_model_round_trips(tokenizers, model_of_a, tmp_path):
    a, _ = tokenizers
    assert kt.TransformerConfig.from_dict(model_of_a.config.to_dict()) == model_of_a.config
    rebuilt = kt.Transformer.from_config(model_of_a.get_config())
    assert rebuilt.config.tokenizer_sha256 == a.sha256
    model_of_a.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert loaded.config.tokenizer_sha256 == a.sha256
    assert kt.TransformerConfig.preset("base", vocab_size=100).tokenizer_sha256 is None


@pytest.mark.slow
def test_the_programs_and_the_loaders_refuse_a_foreign_tokenizer(
    tokenizers, model_of_a, tmp_path, capsys
):
    """serving.export and serving.translate end with one line naming the --tokenizer file and
    status 1, nothing exported; kt.load_translator and the CTranslate2 converter refuse it."""
    from serving import export, translate
    from serving.ctranslate2 import convert

    _, b = tokenizers
    model_path = tmp_path / "model.keras"
    model_of_a.save(model_path)
    flags = ["--model", str(model_path), "--tokenizer", str(b.path)]
    for program, argv in (
        (export, [*flags, "--export-dir", str(tmp_path / "export")]),
        (translate, [*flags, "one two"]),
    ):
        with pytest.raises(SystemExit) as exit_info:
            program.main(argv)
        captured = capsys.readouterr()
        assert exit_info.value.code == 1 and captured.out == ""
        assert len(captured.err.splitlines()) == 1  # no traceback
        assert captured.err.startswith(f"error: {b.path}: the tokenizer {FOREIGN} ")
    assert not (tmp_path / "export").exists()
    with pytest.raises(ValueError, match=FOREIGN):
        kt.load_translator(model_path, tokenizer=b.path)
    with pytest.raises(ValueError, match=f"{b.path}: the tokenizer {FOREIGN}"):
        convert(model_of_a, b.path, tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()
