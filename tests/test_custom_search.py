"""A search written outside the package, from the `Search` contract alone (search.py), decodes
in Python and in an export; a search that breaks the contract is refused when it is made."""

import dataclasses
import typing

import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.decoding import NEG_INF, Search
from keras_transformer.ids import EOS_ID, PAD_ID
from keras_transformer_cli.versions import export_for_serving


class Hypotheses(typing.NamedTuple):
    finished: tf.Tensor  # [A]
    tokens: tf.Tensor  # [A, L]
    scores: tf.Tensor  # [A]
    last: tf.Tensor  # [A]: the token given at the last step


@dataclasses.dataclass(frozen=True)
class NoRepeat(Search):
    """Greedy search that never gives one token twice in a row."""

    def start(self, batch_size, max_length):
        none = tf.zeros([batch_size], tf.int32)
        tokens = tf.zeros([batch_size, max_length], tf.int32)
        return Hypotheses(none > 0, tokens, tf.zeros([batch_size]), none)

    def advance(self, h, log_probs, t, limits):
        repeat = tf.one_hot(h.last, tf.shape(log_probs)[-1]) > 0
        best = tf.argmax(tf.where(repeat, NEG_INF, log_probs), -1, output_type=tf.int32)
        token = tf.where(h.finished, PAD_ID, best)
        gained = tf.where(h.finished, 0.0, tf.gather(log_probs, token, batch_dims=1))
        tokens = tf.where(tf.range(tf.shape(h.tokens)[1]) == t, token[:, None], h.tokens)
        finished = h.finished | (token == EOS_ID) | (t + 1 >= limits)
        return Hypotheses(finished, tokens, h.scores + gained, token), token, None

    def ended(self, h):
        return h.finished

    def outputs(self, h):
        return h.tokens[:, None], h.scores[:, None]


@pytest.mark.slow
def test_a_search_of_ones_own_translates_and_exports(number_translator, tmp_path):
    """No translation repeats a piece; those whose reference repeats none are the reference;
    the export translates as the translator does, with the same scores."""
    model, tokenizer, pairs = number_translator
    sources = [source for source, _ in pairs]
    translator = kt.Translator(model, tokenizer, search=NoRepeat())
    outputs = translator.translate(tf.constant(sources))
    texts = [text.decode() for text in outputs["translation"].numpy()]
    for tokens in outputs["tokens"].numpy():
        assert all(a != b for a, b in zip(tokens[:-1], tokens[1:]) if a != PAD_ID)
    words = [reference.split() for _, reference in pairs]
    distinct = [(t, " ".join(w)) for t, w in zip(texts, words) if len(set(w)) == len(w)]
    assert distinct and all(text == reference for text, reference in distinct)
    assert texts != [reference for _, reference in pairs]  # some references repeat a word
    exported = kt.load_translator(export_for_serving(translator, tmp_path / "no-repeat"))
    served = exported.translate(sources)
    assert [t.text for t in served] == texts
    assert [t.score for t in served] == pytest.approx(outputs["score"].numpy().tolist(), rel=1e-5)


def test_a_search_that_is_not_a_frozen_dataclass_is_refused():
    class Undecorated(NoRepeat):
        pass

    @dataclasses.dataclass
    class Mutable(Search):
        width: int = 2

    for search in (Undecorated, Mutable):
        with pytest.raises(TypeError, match=f"{search.__qualname__} must be a frozen dataclass"):
            search()


def test_a_search_that_gives_no_step_is_refused():
    """A search gives `advance` (log-probabilities, as NoRepeat) or `advance_logits`; without
    either, each would call the other."""

    @dataclasses.dataclass(frozen=True)
    class Stepless(Search):
        pass

    with pytest.raises(TypeError, match="Stepless must give `advance` or `advance_logits`"):
        Stepless()
