"""Translate a test set with a trained model and score it with sacrebleu (corpus BLEU, chrF and
chrF++ on detokenized output; the signatures are printed).

    python -m training.evaluate --model runs/demo/model.keras --split test
    python -m training.evaluate --model exports/transformer --source de.txt --reference en.txt
    python -m training.evaluate --model runs/demo/model.keras --source mono.de.txt --sample \
        --top-p 0.9 --output back-translations.en.txt       # sampled, no reference: no scores

BLEU is sacrebleu's corpus BLEU on detokenized output against untokenized references, beside
sacrebleu's chrF and chrF++ (character n-gram F-scores, which give partial credit to a word with
the right stem); the signatures are printed, so that scores can be compared across papers and tools.
"""

import pathlib
import sys

from keras_transformer_cli import console, flags


def build_parser():
    parser = flags.parser(__doc__, "training.evaluate")
    flags.add_model(parser, "keras", "checkpoint", "saved_model", "ctranslate2")
    flags.add_dataset(parser)
    parser.add_argument("--split", default="test", help="the dataset split to translate")
    flags.add_source(parser)
    parser.add_argument(
        "--reference",
        type=pathlib.Path,
        default=None,
        help="the --source file's reference translations, line by line (none: translate "
        "only, no scores)",
    )
    flags.add_search(parser, exported_own=True)
    flags.add_jit_compile(parser)
    sampling = parser.add_argument_group(
        "sampling", "draw each translation from the model's distribution (back-translation)"
    )
    sampling.add_argument("--sample", action="store_true", help="sample instead of beam search")
    sampling.add_argument(
        "--temperature",
        type=flags.at_least(0.0, float),
        default=1.0,
        help="divides the log-probabilities (0: the most likely token)",
    )
    sampling.add_argument(
        "--top-k", type=flags.COUNT, default=None, help="keep the k most likely tokens"
    )
    sampling.add_argument(
        "--top-p", type=flags.probability, default=None, help="keep the nucleus of probability p"
    )
    flags.add_seed(sampling)
    flags.add_batch_size(parser, 64)
    flags.add_output(
        parser, "the translations (default: translations.<split>.txt beside the model)"
    )
    return parser


def read_pairs(args):
    """(pairs, name): the --source/--reference files' pairs (target None without a reference),
    or the --dataset split's."""
    from keras_transformer.data.corpus import pair_parallel_lines

    from .datasets import Dataset

    if args.source:
        sources = flags.read_flag_lines(args.source, "--source")
        if args.reference is None:
            return [(line, None) for line in sources], args.source.stem
        references = flags.read_flag_lines(args.reference, "--reference")
        pairs = pair_parallel_lines(
            sources, references, f"--source {args.source}", f"--reference {args.reference}"
        ).pairs
        return pairs, args.source.stem
    dataset = Dataset(
        args.dataset, args.source_language, args.target_language, args.data_dir, args.download
    )
    return dataset.pairs(args.split), args.split


@console.program
def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.reference is not None and args.source is None:
        parser.error("--reference needs --source")
    console.start(args.verbose)

    from keras_transformer.data import CorpusError
    from keras_transformer.decoding import SamplingSettings
    from keras_transformer_cli.translators import translator_for

    from . import metrics

    try:
        sampling = None
        if args.sample:
            sampling = SamplingSettings(args.temperature, args.top_k, args.top_p, args.seed).check()
        pairs, name = read_pairs(args)
        if not pairs:
            raise ValueError("there is nothing to translate (no sentence pairs)")
        translator = translator_for(
            args.model,
            args.tokenizer,
            args.beam_size,
            args.alpha,
            args.extra_length,
            sampling,
            args.jit_compile,
        )
    except (ValueError, CorpusError, FileNotFoundError) as error:
        console.fail(error)
    output = (
        args.output
        or (args.model if args.model.is_dir() else args.model.parent) / f"translations.{name}.txt"
    )
    print(f"translating {len(pairs)} sentences with {translator.description}", file=sys.stderr)
    if args.source and args.reference is None:
        hypotheses = metrics.translate_all(
            translator.translate,
            [s for s, _ in pairs],
            args.batch_size,
            metrics.progress_verbosity(),
        )
        print(f"translations written to {metrics.write_translations(hypotheses, output)}")
        return
    metrics.evaluate(translator.translate, pairs, output, args.batch_size)


if __name__ == "__main__":
    main()
