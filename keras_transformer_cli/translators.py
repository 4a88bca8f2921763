"""What translates with a saved model, whichever kind `--model` names: a .keras model or a run's
step checkpoint (our search, `kt.Translator`), an exported SavedModel (its own signatures, as
TensorFlow Serving runs it), or a CTranslate2 folder (`serving.ctranslate2` writes it).

Each is a translator of `keras_transformer.inference` (`translate`, `score`, `description`,
`limits`, `nbest`), so that `training.evaluate`, `serving.translate` and `serving.score` pick and
call them in one way; this module words the library's refusals with the programs' flags.
"""

import pathlib

from keras_transformer_cli import run_dir


def translator_for(
    model_path,
    tokenizer_path=None,
    beam_size=None,
    alpha=None,
    extra_length=None,
    sampling=None,
    jit_compile=False,
):
    """The translator for `model_path`: a directory through `kt.load_translator` (a SavedModel
    decodes as it was exported: a search flag given that differs from its own is refused), a
    file a .keras model or a step checkpoint, with tokenizer.model beside it (or in its run)
    unless `tokenizer_path` is given. Search settings left None are §6.1's
    (`flags.SEARCH_DEFAULTS`). `sampling` (a kt.SamplingSettings) samples instead of beam search;
    `jit_compile` compiles the search with XLA. Raises ValueError naming the flag or file that
    cannot be used."""
    from keras_transformer.inference import ExportedSearchMismatch, load_translator

    model_path = pathlib.Path(model_path)
    if model_path.is_dir():
        for flag, given in (("--sample", sampling is not None), ("--jit-compile", jit_compile)):
            if given:
                raise ValueError(
                    f"{model_path} is a directory (a SavedModel or a CTranslate2 model), which "
                    f"decodes with its own search; {flag} needs a .keras model or a step "
                    "checkpoint"
                )
        try:
            return load_translator(
                model_path, beam_size=beam_size, alpha=alpha, extra_length=extra_length
            )
        except ExportedSearchMismatch as error:
            flag = f"--{error.name.replace('_', '-')}"
            raise ValueError(
                f"{flag} {error.value}: the SavedModel {error.version_dir} searches with {flag} "
                f"{error.own}, as it was exported; leave {flag} out, or export the model again "
                f"with {flag} {error.value} (python -m serving.export --model MODEL.keras "
                f"{flag} {error.value})"
            ) from None
        except FileNotFoundError as error:
            raise ValueError(str(error)) from None
    if not model_path.is_file():
        raise ValueError(f"--model {model_path}: no such file or directory")
    return keras_translator(
        model_path, tokenizer_path, beam_size, alpha, extra_length, sampling, jit_compile
    )


def keras_translator(
    model_path, tokenizer_path, beam_size, alpha, extra_length, sampling, jit_compile
):
    """Our search (`kt.Translator`) on a .keras model or a step checkpoint."""
    import keras_transformer as kt
    from keras_transformer.inference import signature_translator
    from keras_transformer_cli.flags import SEARCH_DEFAULTS

    asked = {"beam_size": beam_size, "alpha": alpha, "extra_length": extra_length}
    settings = {
        name: SEARCH_DEFAULTS[name] if value is None else value for name, value in asked.items()
    }
    model = run_dir.load_model(model_path)
    tokenizer_path = (
        pathlib.Path(tokenizer_path) if tokenizer_path else run_dir.tokenizer_beside(model_path)
    )
    if not tokenizer_path.is_file():
        raise ValueError(f"tokenizer {tokenizer_path} does not exist; pass --tokenizer")
    translator = kt.Translator(
        model,
        kt.SubwordTokenizer.load(tokenizer_path),
        sampling=sampling,
        jit_compile=jit_compile,
        **settings,
    )
    return signature_translator(translator, str(model_path))


def cut_input_refusal(args, translator, what, number, answered=False):
    """The one line refusing input `what` ("source", "prefix" or "target") of sentence `number`
    (from 1) that the model of `translator` cannot hold whole: where it came from and the limit
    (`answered`: a server answered it cut, and its answers were shown)."""
    limits = translator.limits or {}
    limit = limits.get("source" if what == "source" else "target")
    holds = f"{limit} subword pieces and eos" if limit else "its config.max_length"
    if answered:
        return (
            f"{'--target-prefix' if what == 'prefix' else f'sentence {number}'}: the {what} is "
            f"longer than the served model holds ({holds}), which answered it cut (above); "
            "shorten it"
        )
    if what == "prefix":
        return f"--target-prefix is longer than the model holds ({holds}); give a shorter one"
    if what == "target":
        where = f"--target {args.target}:{number}"
    elif getattr(args, "source", None):
        where = f"--source {args.source}:{number}"
    elif getattr(args, "sentences", None):
        where = f"sentence {number} of the arguments"
    else:
        where = f"line {number} of the standard input"
    return (
        f"{where} is longer than the model holds ({holds}); nothing was written: split it, "
        "or leave it out"
    )


def refuse_cut_inputs(args, translator, results, answered=False):
    """ValueError naming the first input of `results` (Translation or Scored, in the order of
    the input) that the model could not hold whole (`cut_input_refusal`)."""
    for number, result in enumerate(results, start=1):
        for what in result.cut:
            raise ValueError(cut_input_refusal(args, translator, what, number, answered))
