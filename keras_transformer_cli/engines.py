"""What translates with a saved model, whichever kind `--model` names: a .keras model or a run's
step checkpoint (our search, `kt.Translator`), an exported SavedModel (its own signature, as
TensorFlow Serving runs it), or a CTranslate2 directory (`serving.ctranslate2` writes it).

Each engine translates Python strings, `translate(sentences, target_prefix=None) ->
[(translation, score)]`, scores given translations, `score(sources, targets) -> [Scored]`, and
says what it runs, so that `training.evaluate`, `serving.translate`, `serving.score` and the
benchmarks pick and call engines in one way.
"""

import json
import os
import pathlib
import typing

from keras_transformer_cli import run_dir
from keras_transformer_cli.versions import latest_version, read_search_settings, search_settings

CTRANSLATE2_LIMITS_FILE = "keras_transformer.json"  # {"max_length": the model's config.max_length}


class Translation(typing.NamedTuple):
    """One translation, its score, and the inputs of its sentence that were longer than the
    model holds and were cut to it (`cut`: "source", "prefix"; empty when none was)."""

    text: str
    score: float
    cut: tuple = ()


class Scored(typing.NamedTuple):
    """Forced decoding of one translation: log P(Y | X) over GNMT's length penalty (`score`, as
    beam search ranks), log P(Y | X) (`log_prob`), each token's log-probability, eos last
    (`token_scores`), and the inputs that were cut to what the model holds (`cut`: "source",
    "target")."""

    score: float
    log_prob: float
    token_scores: tuple
    cut: tuple = ()

    def line(self, normalized=False, tokens=False):
        """One line of text: log P (or the normalised score), then the token scores if asked,
        tab-separated."""
        line = f"{self.score if normalized else self.log_prob:.6f}"
        if tokens:
            line += "\t" + " ".join(f"{value:.6f}" for value in self.token_scores)
        return line


class Engine:
    """`translate(sentences, target_prefix=None) -> [Translation]` (a prefix per sentence, ""
    for none), `score(sources, targets) -> [Scored]`, what it runs, and the pieces it holds:
    `limits` {"source": pieces before eos, "target": pieces before eos (a prefix's, a scored
    target's)}, or None where the model does not say (an export of an earlier version)."""

    def __init__(self, translate, description, score=None, limits=None):
        self.translate, self.description, self.scorer = translate, description, score
        self.limits = limits

    def __call__(self, sentences, target_prefix=None):
        return self.translate(sentences, target_prefix)

    def score(self, sources, targets):
        if self.scorer is None:
            raise ValueError(f"{self.description} cannot score translations")
        return self.scorer(sources, targets) if sources else []


def tensor_engine(signatures, description, limits=None):
    """An Engine around signatures {"serving_default": f(sentences), "translate":
    f(sentences, target_prefix), "score": f(sources, targets)}, each answering dense tensors:
    a `kt.Translator`'s `signatures()` or a loaded SavedModel's (`limits`: see `Engine`). One
    exported before the `translate` signature took a prefix cannot take one (ValueError), nor
    score without `score`; one exported before the `*_cut` outputs reports no cut."""
    import tensorflow as tf

    def strings(texts):
        return tf.constant(list(texts), tf.string)

    def translate(sentences, target_prefix=None):
        if not sentences:
            return []
        if target_prefix is None:
            outputs = signatures["serving_default"](sentences=strings(sentences))
        else:
            call = _signature(signatures, "translate", "target_prefix", description)
            outputs = call(sentences=strings(sentences), target_prefix=strings(target_prefix))
        outputs = {name: value.numpy() for name, value in outputs.items()}
        texts = [t.decode("utf-8", "replace") for t in outputs["translation"]]
        cuts = _cut_outputs(outputs, len(texts), ("source", "prefix"))
        return [Translation(*row) for row in zip(texts, map(float, outputs["score"]), cuts)]

    def score(sources, targets):
        call = _signature(signatures, "score", "sources", description)
        outputs = {
            k: v.numpy()
            for k, v in call(sources=strings(sources), targets=strings(targets)).items()
        }
        return [
            Scored(float(s), float(p), tuple(float(t) for t in row[ids != 0]), cut)
            for s, p, row, ids, cut in zip(
                outputs["score"],
                outputs["log_prob"],
                outputs["token_scores"],
                outputs["tokens"],
                _cut_outputs(outputs, len(sources), ("source", "target")),
            )
        ]

    return Engine(translate, description, score, limits)


def _cuts(flags):
    """Per sentence, the names of {name: [bool per sentence]} that are true there: what was
    cut to the model's length."""
    return [tuple(name for name, cut in zip(flags, row) if cut) for row in zip(*flags.values())]


def _cut_outputs(outputs, count, names):
    """`_cuts` of the outputs NAME_cut (none where an older export has no such output)."""
    return _cuts({name: outputs.get(f"{name}_cut", [False] * count) for name in names})


def limits_of(settings):
    """An Engine's `limits` from a translator's `search_settings` (or an export's)."""
    return {"source": settings["max_source_length"] - 1, "target": settings["max_length"] - 1}


def _signature(signatures, name, argument, description):
    """The signature `name` if it takes `argument`; ValueError saying to export again."""
    function = signatures[name] if name in signatures else None
    if function is not None:
        if hasattr(function, "structured_input_signature"):  # a loaded SavedModel's
            inputs = set(function.structured_input_signature[1])
        else:  # a kt.Translator's tf.function
            inputs = {spec.name for spec in function.input_signature}
        if argument in inputs:
            return function
    raise ValueError(
        f"{description} has no {name!r} signature taking {argument!r}: it was exported by an "
        "earlier keras-transformer; export the model again (python -m serving.export)"
    )


def load_engine(
    model_path,
    tokenizer_path=None,
    beam_size=None,
    alpha=None,
    extra_length=None,
    sampling=None,
    jit_compile=False,
):
    """The Engine for `model_path`. A directory is a CTranslate2 model (model.bin) or a
    SavedModel (a version directory, or the base directory: its highest version, decoding as it
    was exported: a search setting given that differs from its own is refused); a file is a
    .keras model or a step checkpoint, with tokenizer.model beside it unless `tokenizer_path` is
    given. Search settings left None are §6.1's (`flags.SEARCH_DEFAULTS`). `sampling` (a
    kt.Sampling) samples instead of beam search; `jit_compile` compiles the search with XLA.
    Raises ValueError naming the flag or file that cannot be used."""
    from keras_transformer_cli.flags import SEARCH_DEFAULTS

    model_path = pathlib.Path(model_path)
    asked = {"beam_size": beam_size, "alpha": alpha, "extra_length": extra_length}
    beam_size, alpha, extra_length = (
        SEARCH_DEFAULTS[name] if value is None else value for name, value in asked.items()
    )
    if model_path.is_dir():
        for flag, given in (("--sample", sampling is not None), ("--jit-compile", jit_compile)):
            if given:
                raise ValueError(
                    f"{model_path} is a directory (a SavedModel or a CTranslate2 model), which "
                    f"decodes with its own search; {flag} needs a .keras model or a step "
                    "checkpoint"
                )
        if not (model_path / "model.bin").is_file():
            return saved_model_engine(model_path, asked)
        engine = CTranslate2Translator(model_path, beam_size, alpha, extra_length)
        description = f"CTranslate2 {model_path} with {search_name(beam_size, alpha)}"
        return Engine(engine.translate, description, engine.score, engine.limits)
    if not model_path.is_file():
        raise ValueError(f"--model {model_path}: no such file or directory")
    return keras_engine(
        model_path, tokenizer_path, beam_size, alpha, extra_length, sampling, jit_compile
    )


def saved_model_engine(model_dir, asked=None):
    """The serving_default signature of the SavedModel in `model_dir` (or its highest
    version), loaded as TensorFlow Serving loads it: tensorflow and tensorflow_text only. Its
    search is part of its graph: a setting `asked` ({"beam_size", "alpha", "extra_length"}: a
    flag's value, None where not given) that differs from the export's is refused, naming the
    flag and how to export another (a signature taking the settings would make the beam width a
    tensor of the served graph, whose loop is built for one)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    try:
        version_dir = latest_version(model_dir)
    except FileNotFoundError as error:
        raise ValueError(str(error)) from None
    own = read_search_settings(version_dir)
    for name, value in (asked or {}).items():
        if value is not None and own and own[name] != value:
            flag = f"--{name.replace('_', '-')}"
            raise ValueError(
                f"{flag} {value}: the SavedModel {version_dir} searches with {flag} {own[name]}, "
                f"as it was exported; leave {flag} out, or export the model again with "
                f"{flag} {value} (python -m serving.export --model MODEL.keras {flag} {value})"
            )
    signatures = tf.saved_model.load(str(version_dir)).signatures
    return tensor_engine(signatures, f"SavedModel {version_dir}", limits_of(own) if own else None)


def keras_engine(model_path, tokenizer_path, beam_size, alpha, extra_length, sampling, jit_compile):
    """Our search (`kt.Translator`) on a .keras model or a step checkpoint."""
    import keras_transformer as kt

    model = run_dir.load_model(model_path)
    tokenizer_path = (
        pathlib.Path(tokenizer_path) if tokenizer_path else run_dir.tokenizer_beside(model_path)
    )
    if not tokenizer_path.is_file():
        raise ValueError(f"tokenizer {tokenizer_path} does not exist; pass --tokenizer")
    translator = kt.Translator(
        model,
        kt.SubwordTokenizer.load(tokenizer_path),
        beam_size,
        alpha,
        extra_length,
        sampling=sampling,
        jit_compile=jit_compile,
    )
    if sampling is not None:
        search = "sampling ({})".format(
            ", ".join(f"{k} {v}" for k, v in sampling._asdict().items())
        )
    else:
        search = search_name(beam_size, alpha)
    return tensor_engine(
        translator.signatures(),
        f"{model_path} with {search}{', XLA' if jit_compile else ''}",
        limits_of(search_settings(translator)),
    )


def search_name(beam_size, alpha):
    return "greedy search" if beam_size == 1 else f"beam search (beam {beam_size}, alpha {alpha})"


class CTranslate2Translator:
    """Translates strings with a converted model: our tokenization (normalize_text, then the
    sentencepiece model in the directory; sources cut to the model's max_length with eos, as
    `kt.Translator` cuts them), CTranslate2's beam search on raw log-probabilities, and the best
    of its hypotheses under GNMT's length penalty ((5 + |Y|) / 6)^alpha with |Y| counting eos,
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
        if not (model_dir / "model.bin").is_file():
            raise ValueError(f"{model_dir} holds no CTranslate2 model (model.bin)")
        self.workers = workers or len(os.sched_getaffinity(0))
        self.translator = ctranslate2.Translator(
            str(model_dir), device="cpu", inter_threads=self.workers, intra_threads=1
        )
        self.processor = sentencepiece.SentencePieceProcessor(
            model_file=str(model_dir / run_dir.TOKENIZER_FILE)
        )
        limits = json.loads((model_dir / CTRANSLATE2_LIMITS_FILE).read_text())
        self.max_length = limits["max_length"]
        self.beam_size, self.alpha, self.extra_length = beam_size, alpha, extra_length

    def tokenize(self, sentences):
        """(pieces of each sentence, at most max_length - 1 of them: eos comes after, whether
        each was longer and was cut), as `kt.Translator` cuts sources, prefixes and targets."""
        from keras_transformer.tokenizer import normalize_text

        limit = self.max_length - 1
        pieces = [self.processor.encode(normalize_text(s), out_type=str) for s in sentences]
        return [p[:limit] for p in pieces], [len(p) > limit for p in pieces]

    def part_size(self, batch):
        """The size of the parts a batch is split into, one for each worker."""
        return -(-len(batch) // self.workers)

    def translate_pieces(self, pieces, prefixes=None):
        """[(pieces, score)] for lists of source pieces, each translation starting with its
        list of `prefixes` pieces (if given): the best hypothesis and its log P(Y) / lp(Y).
        CTranslate2 leaves the prefix's log-probability out of a hypothesis's score; it is
        added back (`score_batch`), since our searches count it."""
        from keras_transformer import penalty

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
        prefix_log_probs = self.prefix_log_probs(pieces, prefixes)
        best = []
        for result, prefix_log_prob in zip(results, prefix_log_probs):
            scored = [
                (
                    (score + prefix_log_prob)
                    / penalty.length_penalty(min(len(tokens) + 1, bound), self.alpha),
                    tokens,
                )
                for tokens, score in zip(result.hypotheses, result.scores)
            ]
            score, tokens = max(scored, key=lambda pair: pair[0])
            best.append((tokens, score))
        return best

    def prefix_log_probs(self, pieces, prefixes):
        """log P(prefix | source) of each sentence (0 without one), eos left out."""
        if not prefixes or not any(prefixes):
            return [0.0] * len(pieces)
        results = self.translator.score_batch(pieces, [p or [] for p in prefixes])
        return [sum(r.log_probs[:-1]) if p else 0.0 for r, p in zip(results, prefixes)]

    def translate(self, sentences, target_prefix=None):
        """[Translation] for a list of strings, each starting with its string of
        `target_prefix` (a list, "" for none) if given."""
        if not sentences:
            return []
        pieces, source_cut = self.tokenize(sentences)
        prefixes, prefix_cut = None, [False] * len(sentences)
        if target_prefix is not None:
            prefixes, prefix_cut = self.tokenize(target_prefix)
            prefixes = [p or None for p in prefixes]
        return [
            Translation(self.processor.decode_pieces(tokens), score, cut)
            for (tokens, score), cut in zip(
                self.translate_pieces(pieces, prefixes),
                _cuts({"source": source_cut, "prefix": prefix_cut}),
            )
        ]

    @property
    def limits(self):
        return {"source": self.max_length - 1, "target": self.max_length - 1}

    def score(self, sources, targets):
        """[Scored] for lists of source strings and their translations (eos added; sources and
        targets cut to max_length - 1 pieces), with CTranslate2's `score_batch`."""
        from keras_transformer import penalty

        sources, source_cut = self.tokenize(sources)
        targets, target_cut = self.tokenize(targets)
        results = self.translator.score_batch(
            sources, targets, max_input_length=0, max_batch_size=self.part_size(sources)
        )
        scored = []
        cuts = _cuts({"source": source_cut, "target": target_cut})
        for result, cut in zip(results, cuts):
            log_prob = float(sum(result.log_probs))
            length_penalty = penalty.length_penalty(len(result.log_probs), self.alpha)
            scored.append(Scored(log_prob / length_penalty, log_prob, tuple(result.log_probs), cut))
        return scored
