"""BLEU and chrF of a trained model, from a checkpoint, a SavedModel or a CTranslate2 model
(`serving.ctranslate2`), on a dataset split or on files.

    python -m training.evaluate --model runs/demo/model.keras --split test
    python -m training.evaluate --model exports/transformer --source de.txt --reference en.txt
    python -m training.evaluate --model runs/demo/model.keras --source mono.de.txt --sample \
        --top-p 0.9 --output back-translations.en.txt       # sampled, no reference: no scores

BLEU is sacrebleu's corpus BLEU on detokenized output against untokenized references, beside
sacrebleu's chrF and chrF++ (character n-gram F-scores, which give partial credit to a word with
the right stem); the signatures are printed, so that scores can be compared across papers and tools.
"""

import argparse
import pathlib
import sys

from training.console import add_verbose_flag
from training.scoring import (
    print_scores,
    progress_verbosity,
    score_report,
    translate_all,
    write_translations,
)


def load_translate(
    model_path, tokenizer_path=None, beam_size=4, alpha=0.6, sampling=None, jit_compile=False
):
    """A translate function for a .keras file (tokenizer.model beside it unless given), a
    step checkpoint of a run (.weights.npz), or a SavedModel (a version directory, or the base
    directory whose highest version is taken; its decoding settings are those it was exported
    with). `sampling` (a kt.Sampling) samples instead of beam search; `jit_compile` compiles
    the search with XLA (not for a SavedModel, which runs as it was exported)."""
    import tensorflow as tf

    import keras_transformer as kt
    from training import run_dir

    model_path = pathlib.Path(model_path)
    if model_path.is_dir():
        from serving.packaging import latest_version

        for flag, given in (("--sample", sampling is not None), ("--jit-compile", jit_compile)):
            if given:
                raise ValueError(
                    f"{model_path} is a directory (a SavedModel or a CTranslate2 model), which "
                    f"decodes with its own search; {flag} needs a .keras model or a step "
                    "checkpoint"
                )
        if (model_path / "model.bin").is_file():
            return ctranslate2_translate(model_path, beam_size, alpha)
        saved_model = latest_version(model_path)
        if not (saved_model / "saved_model.pb").is_file():
            raise ValueError(f"{saved_model} holds no saved_model.pb")
        import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

        signature = tf.saved_model.load(str(saved_model)).signatures["serving_default"]
        return lambda sentences: signature(sentences=sentences), f"SavedModel {saved_model}"
    if not model_path.is_file():
        raise ValueError(f"{model_path}: no such file or directory")
    model = run_dir.load_model(model_path)
    tokenizer_path = (
        pathlib.Path(tokenizer_path) if tokenizer_path else run_dir.tokenizer_beside(model_path)
    )
    if not tokenizer_path.is_file():
        raise ValueError(f"tokenizer {tokenizer_path} does not exist; pass --tokenizer")
    tokenizer = kt.SubwordTokenizer.load(tokenizer_path)
    translator = kt.Translator(
        model, tokenizer, beam_size, alpha, sampling=sampling, jit_compile=jit_compile
    )
    if sampling is not None:
        search = "sampling ({})".format(
            ", ".join(f"{k} {v}" for k, v in sampling._asdict().items())
        )
    elif beam_size == 1:
        search = "greedy search"
    else:
        search = f"beam search (beam {beam_size}, alpha {alpha})"
    return translator.translate, f"{model_path} with {search}{', XLA' if jit_compile else ''}"


def ctranslate2_translate(model_dir, beam_size, alpha):
    """The translate function of a CTranslate2 model directory (`serving.ctranslate2`)."""
    import tensorflow as tf

    from serving.ctranslate2 import CTranslate2Translator

    engine = CTranslate2Translator(model_dir, beam_size, alpha)

    def translate(sentences):
        texts = [sentence.decode("utf-8") for sentence in sentences.numpy()]
        return {"translation": tf.constant([text for text, _ in engine.translate(texts)])}

    return translate, f"CTranslate2 {model_dir} with beam search (beam {beam_size}, alpha {alpha})"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m training.evaluate",
        description="Translate a test set with a trained model and score it with sacrebleu "
        "(corpus BLEU, chrF and chrF++ on detokenized output; the signatures are printed).",
    )
    parser.add_argument(
        "--model",
        required=True,
        type=pathlib.Path,
        help="a .keras model, a run's step checkpoint (.weights.npz), or a SavedModel "
        "directory (a version, or the base directory: its highest version)",
    )
    parser.add_argument(
        "--tokenizer",
        type=pathlib.Path,
        default=None,
        help="sentencepiece model for a .keras/.npz model (default: the run's tokenizer.model)",
    )
    parser.add_argument(
        "--dataset", default="ding", help="ding, tfds:NAME, folder:DIR or tsv:DIR (default: ding)"
    )
    parser.add_argument(
        "--split", default="test", help="the dataset split to translate (default: test)"
    )
    parser.add_argument(
        "--source-language", default=None, help="source language (folder:DIR needs both)"
    )
    parser.add_argument("--target-language", default=None, help="target language")
    parser.add_argument(
        "--data-dir", default=None, help="tfds data directory / Ding cache directory"
    )
    parser.add_argument(
        "--source",
        type=pathlib.Path,
        default=None,
        help="a file of source sentences, one per line (instead of --dataset/--split)",
    )
    parser.add_argument(
        "--reference",
        type=pathlib.Path,
        default=None,
        help="its reference translations, line by line (none: translate only, no scores)",
    )
    parser.add_argument(
        "--beam-size", type=int, default=4, help="1 = greedy search (default: 4, the paper's)"
    )
    parser.add_argument(
        "--alpha", type=float, default=0.6, help="length penalty (default: 0.6, the paper's)"
    )
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile the search with XLA (a .keras model or checkpoint; see the README for "
        "when it is faster)",
    )
    sampling = parser.add_argument_group(
        "sampling", "draw each translation from the model's distribution (back-translation)"
    )
    sampling.add_argument("--sample", action="store_true", help="sample instead of beam search")
    sampling.add_argument(
        "--temperature", type=float, default=1.0, help="divides the log-probabilities (default: 1)"
    )
    sampling.add_argument("--top-k", type=int, default=None, help="keep the k most likely tokens")
    sampling.add_argument(
        "--top-p", type=float, default=None, help="keep the nucleus of probability p"
    )
    sampling.add_argument("--seed", type=int, default=0, help="the draws' seed (default: 0)")
    parser.add_argument(
        "--batch-size", type=int, default=64, help="sentences decoded together (default: 64)"
    )
    parser.add_argument(
        "--output",
        type=pathlib.Path,
        default=None,
        help="file for the translations (default: translations.<split>.txt beside the model)",
    )
    add_verbose_flag(parser)
    args = parser.parse_args(argv)
    if args.reference is not None and args.source is None:
        parser.error("--reference needs --source")

    from keras_transformer.data import CorpusError, read_parallel_files
    from keras_transformer.data.corpus import read_lines
    from keras_transformer.decoding import Sampling
    from training.datasets import Dataset

    try:
        sampling = None
        if args.sample:
            sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed).check()
        if args.source and args.reference is None:
            pairs = [(line, None) for line in read_lines(args.source)]
            name = args.source.stem
        elif args.source:
            pairs = read_parallel_files(args.source, args.reference).pairs
            name = args.source.stem
        else:
            dataset = Dataset(
                args.dataset, args.source_language, args.target_language, args.data_dir
            )
            pairs, name = dataset.pairs(args.split), args.split
        if not pairs:
            raise ValueError("there is nothing to translate (no sentence pairs)")
        translate, description = load_translate(
            args.model, args.tokenizer, args.beam_size, args.alpha, sampling, args.jit_compile
        )
    except (ValueError, CorpusError, FileNotFoundError) as error:
        parser.exit(1, f"error: {error}\n")
    output = (
        args.output
        or (args.model if args.model.is_dir() else args.model.parent) / f"translations.{name}.txt"
    )
    print(f"translating {len(pairs)} sentences with {description}", file=sys.stderr)
    hypotheses = translate_all(
        translate, [s for s, _ in pairs], args.batch_size, verbose=progress_verbosity()
    )
    if args.source and args.reference is None:
        print(f"translations written to {write_translations(hypotheses, output)}")
        return
    print_scores(score_report(hypotheses, [t for _, t in pairs], output))
    print(f"translations written to {output}, scores to {output}.scores.json")


if __name__ == "__main__":
    main()
