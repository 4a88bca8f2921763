"""Export a trained model as a TensorFlow Serving SavedModel with a `translate` signature.

python -m serving.export --model runs/demo/model.keras --out exports/transformer
"""

import argparse
import pathlib

from training.console import add_verbose_flag


def add_model_arguments(parser):
    """--model and --tokenizer, as the export programs take them."""
    parser.add_argument(
        "--model",
        type=pathlib.Path,
        required=True,
        help="the trained model: a .keras file, or a run's step checkpoint (.weights.npz)",
    )
    parser.add_argument(
        "--tokenizer",
        type=pathlib.Path,
        default=None,
        help=(
            "its sentencepiece model (default: tokenizer.model beside the model or in its run "
            "directory)"
        ),
    )


def model_and_tokenizer(parser, args):
    """The paths of --model and of its tokenizer; exits naming a missing file."""
    from training import run_dir

    tokenizer_path = args.tokenizer or run_dir.tokenizer_beside(args.model)
    for path, what in ((args.model, "model"), (tokenizer_path, "tokenizer")):
        if not path.is_file():
            parser.error(f"{what} {path} does not exist")
    return args.model, tokenizer_path


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m serving.export",
        description="Write a SavedModel whose serving_default signature translates strings "
        "(beam search, §6.1) into OUT/<version>/, the layout TensorFlow Serving loads.",
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        required=True,
        help="the model's base directory, e.g. exports/transformer",
    )
    parser.add_argument(
        "--version",
        type=int,
        default=None,
        help="version number (default: one more than the highest present)",
    )
    parser.add_argument(
        "--beam-size", type=int, default=4, help="beam width (1 = greedy; paper: 4)"
    )
    parser.add_argument(
        "--alpha", type=float, default=0.6, help="length penalty alpha (paper: 0.6)"
    )
    parser.add_argument(
        "--extra-length",
        type=int,
        default=50,
        help="a translation is at most source length + this many tokens (paper: 50)",
    )
    add_verbose_flag(parser)
    args = parser.parse_args(argv)

    import keras_transformer as kt
    from serving.packaging import export_for_serving
    from training import run_dir

    _, tokenizer_path = model_and_tokenizer(parser, args)
    try:
        model = run_dir.load_model(args.model)
        translator = kt.Translator(
            model,
            kt.SubwordTokenizer.load(tokenizer_path),
            args.beam_size,
            args.alpha,
            args.extra_length,
        )
        version_dir = export_for_serving(translator, args.out, args.version)
    except (ValueError, FileExistsError) as error:
        parser.exit(1, f"error: {error}\n")
    print(f"exported {args.model} to {version_dir}")


if __name__ == "__main__":
    main()
