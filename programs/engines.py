"""What translates with a saved model, whichever kind `--model` names: a .keras model or a run's
step checkpoint (our search, `kt.Translator`), an exported SavedModel (its own signature, as
TensorFlow Serving runs it), or a CTranslate2 directory (`serving.ctranslate2` writes it).

Each engine is a function `translate(sentences) -> [(translation, score)]` on Python strings,
with a description of what it runs, so that `training.evaluate`, `serving.translate` and the
benchmarks pick and call engines in one way.
"""

import json
import pathlib

from programs import run_dir
from programs.versions import latest_version

CTRANSLATE2_LIMITS_FILE = "keras_transformer.json"  # {"max_length": the model's config.max_length}


class Engine:
    """`translate(list of str) -> [(translation, score)]`, and what it runs."""

    def __init__(self, translate, description):
        self.translate, self.description = translate, description

    def __call__(self, sentences):
        return self.translate(sentences)


def tensor_engine(call, description):
    """An Engine around `call(tf.string [B]) -> {"translation", "score", ...}`: a
    `kt.Translator`'s `translate` or a SavedModel's signature."""
    import tensorflow as tf

    def translate(sentences):
        if not sentences:
            return []
        outputs = call(tf.constant(list(sentences), tf.string))
        texts = [t.decode("utf-8", "replace") for t in outputs["translation"].numpy()]
        return list(zip(texts, (float(s) for s in outputs["score"].numpy())))

    return Engine(translate, description)


def load_engine(
    model_path,
    tokenizer_path=None,
    beam_size=4,
    alpha=0.6,
    extra_length=50,
    sampling=None,
    jit_compile=False,
):
    """The Engine for `model_path`. A directory is a CTranslate2 model (model.bin) or a
    SavedModel (a version directory, or the base directory: its highest version, decoding as it
    was exported); a file is a .keras model or a step checkpoint, with tokenizer.model beside it
    unless `tokenizer_path` is given. `sampling` (a kt.Sampling) samples instead of beam
    search; `jit_compile` compiles the search with XLA. Raises ValueError naming the flag or
    file that cannot be used."""
    model_path = pathlib.Path(model_path)
    if model_path.is_dir():
        for flag, given in (("--sample", sampling is not None), ("--jit-compile", jit_compile)):
            if given:
                raise ValueError(
                    f"{model_path} is a directory (a SavedModel or a CTranslate2 model), which "
                    f"decodes with its own search; {flag} needs a .keras model or a step "
                    "checkpoint"
                )
        if (model_path / "model.bin").is_file():
            engine = CTranslate2Translator(model_path, beam_size, alpha, extra_length)
            description = f"CTranslate2 {model_path} with {search_name(beam_size, alpha)}"
            return Engine(engine.translate, description)
        return saved_model_engine(model_path)
    if not model_path.is_file():
        raise ValueError(f"--model {model_path}: no such file or directory")
    return keras_engine(
        model_path, tokenizer_path, beam_size, alpha, extra_length, sampling, jit_compile
    )


def saved_model_engine(model_dir):
    """The serving_default signature of the SavedModel in `model_dir` (or its highest
    version), loaded as TensorFlow Serving loads it: tensorflow and tensorflow_text only."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    try:
        version_dir = latest_version(model_dir)
    except FileNotFoundError as error:
        raise ValueError(str(error)) from None
    signature = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    return tensor_engine(
        lambda sentences: signature(sentences=sentences), f"SavedModel {version_dir}"
    )


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
        translator.translate, f"{model_path} with {search}{', XLA' if jit_compile else ''}"
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
    trained model does not choose them."""

    def __init__(self, model_dir, beam_size=4, alpha=0.6, extra_length=50, threads=0):
        import ctranslate2
        import sentencepiece

        model_dir = pathlib.Path(model_dir)
        if not (model_dir / "model.bin").is_file():
            raise ValueError(f"{model_dir} holds no CTranslate2 model (model.bin)")
        self.translator = ctranslate2.Translator(
            str(model_dir), device="cpu", intra_threads=threads
        )
        self.processor = sentencepiece.SentencePieceProcessor(
            model_file=str(model_dir / run_dir.TOKENIZER_FILE)
        )
        limits = json.loads((model_dir / CTRANSLATE2_LIMITS_FILE).read_text())
        self.max_length = limits["max_length"]
        self.beam_size, self.alpha, self.extra_length = beam_size, alpha, extra_length

    def tokenize(self, sentences):
        """Source pieces, at most max_length - 1 of them (eos comes after)."""
        from keras_transformer.tokenizer import normalize_text

        return [
            self.processor.encode(normalize_text(s), out_type=str)[: self.max_length - 1]
            for s in sentences
        ]

    def translate_pieces(self, pieces):
        """[(pieces, score)] for lists of source pieces: the best hypothesis and its
        log P(Y) / lp(Y)."""
        bound = min(max(len(p) for p in pieces) + 1 + self.extra_length, self.max_length)
        results = self.translator.translate_batch(
            pieces,
            beam_size=self.beam_size,
            num_hypotheses=self.beam_size,
            length_penalty=0.0,  # raw log-probabilities: GNMT's penalty is applied below
            return_scores=True,
            max_input_length=0,  # cut by tokenize
            max_decoding_length=bound,  # tokens with eos, or cut at the bound without it
        )
        best = []
        for result in results:
            scored = [
                (score / ((5.0 + min(len(tokens) + 1, bound)) / 6.0) ** self.alpha, tokens)
                for tokens, score in zip(result.hypotheses, result.scores)
            ]
            score, tokens = max(scored, key=lambda pair: pair[0])
            best.append((tokens, score))
        return best

    def translate(self, sentences):
        """[(translation, score)] for a list of strings."""
        if not sentences:
            return []
        return [
            (self.processor.decode_pieces(tokens), score)
            for tokens, score in self.translate_pieces(self.tokenize(sentences))
        ]
