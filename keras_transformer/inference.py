"""Translation from a saved model in a few lines:

    translator = kt.load_translator("exports/transformer")
    for translation in translator.translate(["Guten Morgen."]):
        print(translation.score, translation.text)

`load_translator` opens a SavedModel export (through its signatures, as TensorFlow Serving runs
it), a CTranslate2 folder, or a .keras model with its tokenizer, and returns a translator:
`translate(sentences, *, n_best=None, target_prefix=None)` gives each sentence's best translation
(or its `n_best` best), `score(sources, targets)` scores given translations (forced decoding),
`description` says what it runs and `limits` the pieces it holds.
"""

import operator
import pathlib

from keras_transformer.exports import (
    CTRANSLATE2_MODEL_FILE,
    TOKENIZER_FILE,
    latest_version,
    limits_of,
    read_search_settings,
    search_name,
    search_settings,
)
from keras_transformer.results import (
    TRANSLATE_INPUTS,
    Scored,
    Translation,
    cut_of,
    per_sentence,
    text_of,
)


class TooManyHypotheses(ValueError):
    """`n_best` beyond the hypotheses a translator keeps per sentence (`kept`)."""

    def __init__(self, n_best, kept, description):
        self.n_best, self.kept, self.description = n_best, kept, description
        super().__init__(
            f"n_best {n_best}: {description} keeps the {kept} best translations of each "
            f"sentence; ask for at most {kept}"
        )


class ExportedSearchMismatch(ValueError):
    """A search setting asked of a SavedModel that differs from the one its graph runs: the
    setting's `name`, the `value` asked, the export's `own` and its `version_dir`."""

    def __init__(self, name, value, own, version_dir):
        self.name, self.value, self.own, self.version_dir = name, value, own, version_dir
        super().__init__(
            f"{name}={value}: the SavedModel {version_dir} searches with {name}={own}, as it was "
            f"exported; leave {name} out, or export the model again with {name}={value}"
        )


def load_translator(path, tokenizer=None, beam_size=None, alpha=None, extra_length=None):
    """A translator for the model at `path`: a CTranslate2 folder (model.bin), a SavedModel (a
    version directory, or a base directory of numbered versions: its highest), or a .keras model
    (with `tokenizer`, default tokenizer.model beside it). A SavedModel searches as it was
    exported: a setting given that differs from its own raises ExportedSearchMismatch (an export
    that records no settings is taken as it is). Elsewhere settings left None are §6.1's: beam
    4, alpha 0.6, at most 50 tokens beyond the source. A folder holds its own tokenizer:
    `tokenizer` is for a .keras model only."""
    path = pathlib.Path(path)
    asked = {"beam_size": beam_size, "alpha": alpha, "extra_length": extra_length}
    given = {name: value for name, value in asked.items() if value is not None}
    if path.is_dir() and (path / CTRANSLATE2_MODEL_FILE).is_file():
        from keras_transformer.ctranslate2_translator import CTranslate2Translator

        return CTranslate2Translator(path, **given)
    if path.is_dir():
        return _saved_model_translator(path, given)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if path.suffix != ".keras":
        raise ValueError(
            f"{path}: expected a .keras model, a SavedModel directory or a CTranslate2 folder"
        )
    return _keras_translator(path, tokenizer, given)


def _saved_model_translator(model_dir, given):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    version_dir = latest_version(model_dir)
    own = read_search_settings(version_dir)
    for name, value in given.items():
        if own and own[name] != value:
            raise ExportedSearchMismatch(name, value, own[name], version_dir)
    try:
        loaded = tf.saved_model.load(str(version_dir))
    except (tf.errors.OpError, ValueError, OSError, IndexError) as error:
        reason = " ".join(str(getattr(error, "message", error)).split())[:200]
        raise ValueError(
            f"{version_dir}: not a readable SavedModel ({reason}); if a file of it is cut or "
            "damaged, copy or export it again"
        ) from None
    return SignatureTranslator(
        loaded.signatures,
        f"SavedModel {version_dir}{', XLA' if own.get('jit_compile') else ''}",
        limits_of(own) if own else None,
        own.get("nbest"),
    )


def _keras_translator(model_path, tokenizer, given):
    import keras

    import keras_transformer as kt

    tokenizer = pathlib.Path(tokenizer) if tokenizer else model_path.with_name(TOKENIZER_FILE)
    if not tokenizer.is_file():
        raise FileNotFoundError(f"{tokenizer}: no such tokenizer; pass the model's tokenizer")
    translator = kt.Translator(
        keras.saving.load_model(model_path), kt.SubwordTokenizer.load(tokenizer), **given
    )
    return signature_translator(translator, str(model_path))


def signature_translator(translator, name):
    """The SignatureTranslator of a `kt.Translator`, described as `name` with its search."""
    search = search_name(translator.beam_size, translator.alpha)
    if translator.sampling is not None:
        search = "sampling ({})".format(
            ", ".join(f"{k} {v}" for k, v in translator.sampling._asdict().items())
        )
    return SignatureTranslator(
        translator.signatures(),
        f"{name} with {search}{', XLA' if translator.jit_compile else ''}",
        limits_of(search_settings(translator)),
        translator.nbest,
    )


class LoadedTranslator:
    """What every loaded translator does with its inputs before it translates or scores them:
    lists of strings, aligned lists of one length, an `n_best` it can give. A subclass sets
    `description` and `nbest` and gives `translate_lists` and `score_lists`."""

    def translate(self, sentences, *, n_best=None, target_prefix=None):
        """[Translation] for a list of strings, or with `n_best` a list per sentence of its
        `n_best` best, best first; each translation starts with its string of `target_prefix`
        (a list, "" for none) if given."""
        sentences, target_prefix = string_lists(sentences, target_prefix=target_prefix)
        check_n_best(n_best, self.nbest, self.description)
        return self.translate_lists(sentences, n_best, target_prefix) if sentences else []

    def score(self, sources, targets):
        """[Scored] for lists of source strings and their translations (eos added)."""
        sources, targets = string_lists(sources, targets=targets)
        return self.score_lists(sources, targets) if sources else []


class SignatureTranslator(LoadedTranslator):
    """Translates Python strings through the signatures {"serving_default": f(sentences),
    "translate": f(sentences, target_prefix), "score": f(sources, targets)} of a loaded
    SavedModel or a `kt.Translator` (`signatures()`), each answering dense tensors. `limits`:
    {"source": pieces before eos, "target": pieces before eos (a prefix's, a scored target's)},
    None where the export does not say; `nbest`: the hypotheses kept per sentence (None: the
    export does not say). An export without a prefix-taking `translate` or a `score` signature
    refuses those calls (ValueError); one without `*_cut` outputs reports no cut."""

    def __init__(self, signatures, description, limits=None, nbest=None):
        self.signatures, self.description = signatures, description
        self.limits, self.nbest = limits, nbest

    def translate_lists(self, sentences, n_best, target_prefix):
        if target_prefix is None:
            outputs = self.signatures["serving_default"](sentences=_tensor(sentences))
        else:
            call = self.signature("translate", "target_prefix")
            outputs = call(sentences=_tensor(sentences), target_prefix=_tensor(target_prefix))
        outputs = per_sentence({name: value.numpy() for name, value in outputs.items()})
        cuts = [cut_of(row, TRANSLATE_INPUTS) for row in outputs]
        if n_best is None:
            return [
                Translation(text_of(row["translation"]), float(row["score"]), cut)
                for row, cut in zip(outputs, cuts)
            ]
        if "nbest_translations" not in outputs[0]:
            raise ValueError(
                f"{self.description} has no n-best outputs: export the model again "
                "(python -m serving.export)"
            )
        check_n_best(n_best, len(outputs[0]["nbest_translations"]), self.description)
        return [
            [
                Translation(text_of(text), float(score), cut)
                for text, score in zip(row["nbest_translations"][:n_best], row["nbest_scores"])
            ]
            for row, cut in zip(outputs, cuts)
        ]

    def score_lists(self, sources, targets):
        call = self.signature("score", "sources")
        outputs = call(sources=_tensor(sources), targets=_tensor(targets))
        outputs = {name: value.numpy() for name, value in outputs.items()}
        return [Scored.from_outputs(row) for row in per_sentence(outputs)]

    def signature(self, name, argument):
        """The signature `name` if it takes `argument`; ValueError saying to export again."""
        function = self.signatures[name] if name in self.signatures else None
        if function is not None:
            if hasattr(function, "structured_input_signature"):  # a loaded SavedModel's
                inputs = set(function.structured_input_signature[1])
            else:  # a kt.Translator's tf.function
                inputs = {spec.name for spec in function.input_signature}
            if argument in inputs:
                return function
        raise ValueError(
            f"{self.description} has no {name!r} signature taking {argument!r}: export the model "
            "again (python -m serving.export)"
        )


def check_n_best(n_best, kept, description):
    """ValueError unless `n_best` is None or a whole number of at least 1; TooManyHypotheses
    beyond `kept` (the hypotheses a translator keeps per sentence; None: unknown)."""
    if n_best is None:
        return
    try:
        whole = not isinstance(n_best, bool) and operator.index(n_best) >= 1
    except TypeError:
        whole = False
    if not whole:
        raise ValueError(f"n_best must be a whole number of at least 1, got {n_best!r}")
    if kept is not None and n_best > kept:
        raise TooManyHypotheses(n_best, kept, description)


def string_lists(sentences, **aligned):
    """`sentences` and each of `aligned` ({name: strings or None}) as lists, in that order;
    TypeError for one string (a list of its characters), ValueError for an aligned list of
    another length."""
    lists = []
    for name, values in {"sentences": sentences, **aligned}.items():
        if isinstance(values, (str, bytes)):
            raise TypeError(f"{name} must be a list of strings, not one string")
        values = None if values is None else list(values)
        if values is not None and lists and len(values) != len(lists[0]):
            raise ValueError(f"{len(lists[0])} sentences but {len(values)} {name}")
        lists.append(values)
    return lists


def _tensor(texts):
    import tensorflow as tf

    return tf.constant(texts, tf.string)
