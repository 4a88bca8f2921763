"""Strings in, translations out: the model, its tokenizer and beam search (§6.1) as one
`tf.Module`, saved as a SavedModel (keras_transformer_cli/versions.py lays it out for
TensorFlow Serving).

Three signatures. `serving_default` takes a batch of strings `sentences` [B]; `translate` takes
`sentences` [B] and `target_prefix` [B], strings each translation must start with (an empty
string: none; TensorFlow Serving needs every input of a signature, so `serving_default` is the
one without). Both return dense tensors with a batch dimension: `translation` [B] string,
`score` [B] float32 (log-probability over the length penalty), `tokens` [B, L] int32 (0 after
eos); the n-best list `nbest_translations` [B, K] string and `nbest_scores` [B, K] float32,
best first (column 0 is `translation` and `score`); `source_cut` [B] bool, whether the
source was longer than the model holds and was cut (and, from `translate`, `prefix_cut`, the
same for the prefix); `alignment` [B, T, S] float32 (T: the
batch's longest translation, eos included), the encoder-decoder attention of the last decoder
layer averaged over its heads while the decoder reads the best translation (row t: the source
positions attended when producing token t; rows of real tokens sum to 1, padding rows and
columns are 0), and `source_tokens` [B, S] int32, the source ids its columns refer to.

`score` takes `sources` [B] and their translations `targets` [B] and returns forced decoding's
`score` [B] (log P(Y | X) over the length penalty, as beam search ranks), `log_prob` [B] (the
sum), `token_scores` [B, T] float32, each target token's log-probability (eos included, 0 after
it), `tokens` [B, T] int32, the target ids they refer to, and `source_cut` and `target_cut`
[B] bool. The graph uses only core
TensorFlow and tensorflow-text ops, which the model server links.
"""

import types

import numpy as np
import tensorflow as tf

from keras_transformer.decoding import (
    Beam,
    Sampler,
    alignment,
    encode,
    encoder_decoder_attention,
    search_model,
)
from keras_transformer.ids import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.scoring import score


class Translator(tf.Module):
    """`translate(sentences)`, `translate_with_prefix(sentences, target_prefix)` and
    `score(sources, targets)` for a trained model and its SubwordTokenizer (refused, a
    ValueError, when it is not the model's: `TransformerConfig.check_tokenizer`).

    Source sentences longer than `max_source_length` subword tokens (default: the model's
    `config.max_length`, eos included) are truncated to it, and so are target prefixes and
    scored targets longer than the model holds (config.max_length - 1 pieces and eos); the
    outputs `source_cut`, `prefix_cut` and `target_cut` say which sentences, for a program to
    refuse or report them (a server cannot refuse one sentence of a batch). Each translation is
    at most source length + `extra_length` tokens (§6.1; a longer prefix's length instead), and,
    for a non-empty source, at least `min_length` (default 1: never empty). `beam_size=1` is
    greedy search. `nbest` (default: the beam size) is how many hypotheses the n-best outputs
    list. With `sampling` (a `kt.SamplingSettings`) each translation is drawn from the model's
    distribution instead, reproducibly for its seed (back-translation); its n-best list is that
    one translation. `search`, a `kt.decoding.Search` (e.g. `kt.DiverseBeam`), searches with it
    instead of beam search or sampling (its `beam_size`, and its `alpha` if it has one, are
    the translator's; a `beam_size` or `alpha` given beside it must agree). Without either,
    beam search of `beam_size` (default 4) and `alpha` (default 0.6), §6.1.
    `jit_compile=True` compiles the search (the encoder and the decoding loop, with static
    shapes) as one XLA function, tokenizing, detokenizing and the alignment outside it: for
    translating in Python (`training.evaluate --jit-compile`) and for an XLA export
    (`serving.export --jit-compile`). XLA compiles once per batch size and source length rounded
    up to a multiple of 16. TensorFlow Serving runs such an export only when started with
    `--xla_cpu_compilation_enabled=true`, on a CPU (its GPU build cannot: serving #2214).
    """

    def __init__(
        self,
        model,
        tokenizer,
        beam_size=None,
        alpha=None,
        extra_length=50,
        max_source_length=None,
        min_length=1,
        nbest=None,
        sampling=None,
        jit_compile=False,
        name="translator",
        search=None,
    ):
        super().__init__(name=name)
        search = _search(beam_size, alpha, sampling, search)
        alpha = getattr(search, "alpha", BEAM.alpha if alpha is None else alpha)
        beam_size = search.beam_size
        nbest = nbest or beam_size
        if not 1 <= nbest <= beam_size:
            raise ValueError(f"nbest must be in 1..beam_size={beam_size}, got {nbest}")
        model.config.check_tokenizer(tokenizer)
        # Keras 3 variables wrap tf.Variables. The SavedModel must track the wrapped ones: tracked
        # through the Keras model, the wrappers are saved as copies that the graph never reads,
        # and TensorFlow Serving's session loader fails with "Could not find variable ...".
        max_source_length = max_source_length or model.config.max_length
        if not 1 < max_source_length <= model.config.max_length:
            raise ValueError(
                f"max_source_length must be in 2..config.max_length={model.config.max_length}, "
                f"got {max_source_length}"
            )
        self._keras = types.SimpleNamespace(model=model)  # not part of the object graph
        self.model_variables = [variable.value for variable in model.variables]
        self.tokenizer = tokenizer
        self.beam_size = beam_size
        self.alpha = alpha
        self.extra_length = extra_length
        self.max_source_length = max_source_length
        self.min_length = min_length
        self.nbest = nbest
        self.sampling = getattr(search, "sampling", None)  # the settings of a Sampler
        self.search = search
        self.jit_compile = jit_compile
        self.compiled_search = (
            tf.function(self.search_ids, jit_compile=True, autograph=False) if jit_compile else None
        )
        self.translate = tf.function(
            self._translate, input_signature=[_strings("sentences")], autograph=False
        )
        self.translate_with_prefix = tf.function(
            self._translate,
            input_signature=[_strings("sentences"), _strings("target_prefix")],
            autograph=False,
        )
        self.score = tf.function(
            self._score, input_signature=[_strings("sources"), _strings("targets")], autograph=False
        )

    @property
    def model(self):
        return self._keras.model

    def save(self, directory):
        """Writes the SavedModel to `directory`: the tokenizer's model inside, and the
        `serving_default`, `translate` and `score` signatures (with `jit_compile`, the
        translating ones' search marked for XLA)."""
        tf.saved_model.save(self, str(directory), signatures=self.signatures())
        return directory

    def signatures(self):
        """The SavedModel's signatures by name: `serving_default`, `translate` (with a target
        prefix) and `score`."""
        return {
            "serving_default": self.translate,
            "translate": self.translate_with_prefix,
            "score": self.score,
        }

    def source_ids(self, sentences):
        """Subword ids of `sentences` with eos, truncated to max_source_length, padded [B, S],
        and which sentences were truncated, bool [B]."""
        return self.ids_within(sentences, self.max_source_length - 1, eos=True)

    def target_ids(self, sentences, eos=True):
        """Subword ids of target `sentences` [B], with eos unless `eos` is False, at most
        config.max_length - 1 pieces (a prefix leaves room for eos) padded [B, T], and which
        were longer, bool [B]."""
        return self.ids_within(sentences, self.model.config.max_length - 1, eos)

    def ids_within(self, sentences, limit, eos):
        """(ids [B, <= limit (+ eos)] padded, bool [B]: more than `limit` pieces were cut)."""
        pieces = self.tokenizer.tokenize(sentences)
        cut = pieces.row_lengths() > limit
        pieces = pieces[:, :limit]
        if eos:
            pieces = tf.concat([pieces, tf.fill([pieces.nrows(), 1], EOS_ID)], axis=1)
        return pieces.to_tensor(), cut

    def search_ids(self, source, prefix=None, encoded=None):
        """The n-best ids [B, K, L] and scores [B, K] of source ids [B, S] (K = 1 when
        sampling), each starting with its row of `prefix` ids [B, P] if given; `encoded`, the
        source's (memory, mask) if already computed."""
        return search_model(
            self.model,
            source,
            self.search,
            max_length=None,
            extra_length=self.extra_length,
            min_length=self.min_length,
            target_prefix=prefix,
            static_shapes=self.jit_compile,
            encoded=encoded,
        )

    def xla_search_ids(self, source, prefix=None):
        """search_ids compiled with XLA on the source padded to a multiple of 16 positions, so
        that a few shapes need compiling; the outputs are cut back to the unpadded bound (no
        sentence's own bound changes: they count real tokens)."""
        length = tf.shape(source)[1]
        padding = -length % 16
        ids, scores = self.compiled_search(tf.pad(source, [[0, 0], [0, padding]]), prefix)
        if prefix is not None:  # a longer prefix sets the bound (decoding.constraints.prepare)
            length = tf.maximum(length, tf.shape(prefix)[1])
        bound = tf.minimum(length + self.extra_length, self.model.config.max_length)
        return ids[:, :, :bound], scores

    def _translate(self, sentences, target_prefix=None):
        source, source_cut = self.source_ids(sentences)
        prefix = prefix_cut = None
        if target_prefix is not None:
            prefix, prefix_cut = self.target_ids(target_prefix, eos=False)
        encoded = None  # the encoder runs once, for the search and the alignment
        if self.compiled_search is None:
            encoded = encode(self.model, source)
            ids, scores = self.search_ids(source, prefix, encoded)
        else:
            ids, scores = self.xla_search_ids(source, prefix)
        tokens = ids[:, 0]
        nbest_ids = ids[:, : self.nbest]
        nbest_shape = tf.shape(nbest_ids)
        nbest_texts = self.tokenizer.detokenize(tf.reshape(nbest_ids, [-1, nbest_shape[2]]))
        nbest_translations = tf.reshape(nbest_texts, nbest_shape[:2])
        outputs = {
            "translation": nbest_translations[:, 0],
            "score": scores[:, 0],
            "tokens": tokens,
            "nbest_translations": nbest_translations,
            "nbest_scores": scores[:, : self.nbest],
            "alignment": alignment(self.model, source, tokens, encoded),
            "source_tokens": source,
            "source_cut": source_cut,
        }
        return outputs if prefix_cut is None else {**outputs, "prefix_cut": prefix_cut}

    def _score(self, sources, targets):
        target, target_cut = self.target_ids(targets)
        source, source_cut = self.source_ids(sources)
        token_scores, log_probs, scores = score(self.model, source, target, self.alpha)
        return {
            "score": scores,
            "log_prob": log_probs,
            "token_scores": token_scores,
            "tokens": target,
            "source_cut": source_cut,
            "target_cut": target_cut,
        }

    def attention(self, sentence):
        """The encoder-decoder attention (§3.2.3) behind the translation of one sentence:
        (source pieces [S], translation pieces [T] with eos, float32 weights
        [layers, heads, T, S])."""
        source_ids, _ = self.source_ids(tf.constant([sentence]))
        tokens = self.translate(tf.constant([sentence]))["tokens"][0].numpy()
        tokens = tokens[tokens != PAD_ID]
        target_in = np.concatenate([[BOS_ID], tokens[:-1]])[None].astype("int32")
        weights = encoder_decoder_attention(self.model, source_ids, target_in)
        pieces = [self.tokenizer.id_to_piece(int(i)) for i in source_ids[0].numpy()]
        return (
            pieces,
            [self.tokenizer.id_to_piece(int(i)) for i in tokens],
            np.stack([np.asarray(w[0], "float32") for w in weights]),
        )


BEAM = Beam(4, 0.6)  # §6.1's beam search: the Translator's default


def _search(beam_size, alpha, sampling, search):
    """The Search a Translator runs: `search` if given (refused where `beam_size` or `alpha`
    is given and differs from its own), else sampling with `sampling`'s settings, else beam
    search."""
    if search is not None and sampling is not None:
        raise ValueError("give either `search` or `sampling`, not both")
    if sampling is not None:
        return Sampler(sampling.check())
    if search is None:
        return Beam(
            BEAM.beam_size if beam_size is None else beam_size,
            BEAM.alpha if alpha is None else alpha,
        )
    given = {"beam_size": beam_size, "alpha": alpha}
    differing = [
        f"{name}={value}"
        for name, value in given.items()
        if value is not None and value != getattr(search, name, value)
    ]
    if differing:
        raise ValueError(f"{', '.join(differing)} differs from the search's: {search}")
    return search


def _strings(name):
    """A signature input: a batch of strings [B] called `name`."""
    return tf.TensorSpec([None], tf.string, name=name)
