"""Translation with a model converted to CTranslate2 (`serving.ctranslate2` writes the folder),
through the same interface as `inference.SignatureTranslator`. Needs ctranslate2 and
sentencepiece (the `ctranslate2` extra), and TensorFlow only as Keras's backend (the package
imports keras: `KERAS_BACKEND=jax`, or `numpy`, does without it)."""

import json
import os
import pathlib

from keras_transformer import penalty
from keras_transformer.exports import (
    CTRANSLATE2_LIMITS_FILE,
    CTRANSLATE2_MODEL_FILE,
    TOKENIZER_FILE,
    search_name,
)
from keras_transformer.inference import LoadedTranslator
from keras_transformer.results import SCORE_INPUTS, TRANSLATE_INPUTS, Scored, Translation, cut_of
from keras_transformer.text import normalize_text


class CTranslate2Translator(LoadedTranslator):
    """Translates strings with a converted model: our tokenization (normalize_text, then the
    sentencepiece model in the folder; sources cut to the model's max_length with eos, as
    `kt.Translator` cuts them), CTranslate2's beam search on raw log-probabilities, and its
    hypotheses ranked under GNMT's length penalty ((5 + |Y|) / 6)^alpha with |Y| counting eos,
    as `kt.beam_search` scores them (CTranslate2's own penalty is |Y|^alpha). A translation is
    at most source length (with eos) + `extra_length` tokens (§6.1) and the model's max_length;
    CTranslate2 takes one bound per call, so in a batch each sentence may run to the batch's
    largest bound. Unlike our searches, CTranslate2 does not forbid <pad> and <s> as outputs
    (forbidding them there renormalises the probabilities, and the scores would differ): a
    trained model does not choose them.

    `workers` translate in parallel (default 0: one per core), one thread each: a batch is
    split into as many parts (CTranslate2 sorts it by length first). CTranslate2's threads
    within a batch (OpenMP) spin between the many small parallel regions of a step; two
    translators in one process, each with such threads, then take turns for the cores, and the
    second runs batch-1 beam search many times slower. Single-threaded workers do not spin, and
    split batches run about as fast at large batches (the figures: benchmarks/README.md,
    "Served path")."""

    def __init__(self, model_dir, beam_size=4, alpha=0.6, extra_length=50, workers=0):
        import ctranslate2
        import sentencepiece

        model_dir = pathlib.Path(model_dir)
        if not (model_dir / CTRANSLATE2_MODEL_FILE).is_file():
            raise ValueError(f"{model_dir} holds no CTranslate2 model ({CTRANSLATE2_MODEL_FILE})")
        self.workers = workers or _cores()
        self.translator = ctranslate2.Translator(
            str(model_dir), device="cpu", inter_threads=self.workers, intra_threads=1
        )
        self.processor = sentencepiece.SentencePieceProcessor(
            model_file=str(model_dir / TOKENIZER_FILE)
        )
        limits = json.loads((model_dir / CTRANSLATE2_LIMITS_FILE).read_text())
        self.max_length = limits["max_length"]
        self.beam_size, self.alpha, self.extra_length = beam_size, alpha, extra_length
        self.nbest = beam_size  # the hypotheses CTranslate2 returns per sentence
        self.description = f"CTranslate2 {model_dir} with {search_name(beam_size, alpha)}"

    @property
    def limits(self):
        return {"source": self.max_length - 1, "target": self.max_length - 1}

    def tokenize(self, sentences):
        """(pieces of each sentence, at most max_length - 1 of them: eos comes after, whether
        each was longer and was cut), as `kt.Translator` cuts sources, prefixes and targets."""
        limit = self.max_length - 1
        pieces = [self.processor.encode(normalize_text(s), out_type=str) for s in sentences]
        return [p[:limit] for p in pieces], [len(p) > limit for p in pieces]

    def part_size(self, batch):
        """The size of the parts a batch is split into, one for each worker."""
        return -(-len(batch) // self.workers)

    def translate_pieces(self, pieces, prefixes=None):
        """Per list of source pieces, its hypotheses [(pieces, score)], best first under
        log P(Y) / lp(Y), each starting with its list of `prefixes` pieces (if given).
        CTranslate2 leaves the prefix's log-probability out of a hypothesis's score; it is
        added back (`score_batch`), since our searches count it."""
        longest = max(len(p) for p in [*pieces, *(prefixes or [])] if p is not None)
        bound = min(longest + 1 + self.extra_length, self.max_length)  # the Translator's
        results = self.translator.translate_batch(
            pieces,
            target_prefix=prefixes,
            beam_size=self.beam_size,
            num_hypotheses=self.beam_size,
            length_penalty=0.0,  # raw log-probabilities: GNMT's penalty is applied below
            return_scores=True,
            max_input_length=0,  # cut by tokenize
            max_decoding_length=bound,  # tokens with eos (and the prefix), or cut at the bound
            max_batch_size=self.part_size(pieces),
        )
        ranked = []
        for result, prefix_log_prob in zip(results, self.prefix_log_probs(pieces, prefixes)):
            scored = [
                (
                    tokens,
                    (score + prefix_log_prob)
                    / penalty.length_penalty(min(len(tokens) + 1, bound), self.alpha),
                )
                for tokens, score in zip(result.hypotheses, result.scores)
            ]
            ranked.append(sorted(scored, key=lambda pair: -pair[1]))
        return ranked

    def prefix_log_probs(self, pieces, prefixes):
        """log P(prefix | source) of each sentence (0 without one), eos left out."""
        if not prefixes or not any(prefixes):
            return [0.0] * len(pieces)
        results = self.translator.score_batch(pieces, [p or [] for p in prefixes])
        return [sum(r.log_probs[:-1]) if p else 0.0 for r, p in zip(results, prefixes)]

    def translate_lists(self, sentences, n_best, target_prefix):
        pieces, source_cut = self.tokenize(sentences)
        prefixes, prefix_cut = None, [False] * len(sentences)
        if target_prefix is not None:
            prefixes, prefix_cut = self.tokenize(target_prefix)
            prefixes = [p or None for p in prefixes]
        translations = [
            [Translation(self.processor.decode_pieces(tokens), score, cut) for tokens, score in h]
            for h, cut in zip(
                self.translate_pieces(pieces, prefixes),
                cut_flags(TRANSLATE_INPUTS, source_cut, prefix_cut),
            )
        ]
        if n_best is None:
            return [hypotheses[0] for hypotheses in translations]
        return [hypotheses[:n_best] for hypotheses in translations]

    def score_lists(self, sources, targets):
        """Sources and targets cut to max_length - 1 pieces, scored by CTranslate2's
        `score_batch`."""
        sources, source_cut = self.tokenize(sources)
        targets, target_cut = self.tokenize(targets)
        results = self.translator.score_batch(
            sources, targets, max_input_length=0, max_batch_size=self.part_size(sources)
        )
        scored = []
        for result, cut in zip(results, cut_flags(SCORE_INPUTS, source_cut, target_cut)):
            log_prob = float(sum(result.log_probs))
            length_penalty = penalty.length_penalty(len(result.log_probs), self.alpha)
            scored.append(Scored(log_prob / length_penalty, log_prob, tuple(result.log_probs), cut))
        return scored


def cut_flags(names, *flags):
    """Per sentence, the names of `names` whose list of `flags` (a bool per sentence, in the
    order of `names`) is true there, read as an export's NAME_cut outputs are."""
    return [
        cut_of({f"{name}_cut": flag for name, flag in zip(names, row)}, names)
        for row in zip(*flags)
    ]


def _cores():
    """The cores this process may run on (all of them where the system does not say)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
