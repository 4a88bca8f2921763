"""Write a SavedModel whose serving_default signature translates strings (beam search, §6.1) into
EXPORT_DIR/<version>/, the layout TensorFlow Serving loads.

python -m serving.export --model runs/demo/model.keras --export-dir exports/transformer
"""

from programs import console, flags


def build_parser():
    parser = flags.parser(__doc__, "serving.export")
    flags.add_model(parser, "keras", "checkpoint")
    flags.add_export_dir(parser)
    flags.add_version(parser)
    flags.add_search(parser)
    return parser


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)

    import keras_transformer as kt
    from programs import run_dir
    from programs.versions import export_for_serving

    try:
        model, tokenizer_path = run_dir.load_with_tokenizer(args.model, args.tokenizer)
        translator = kt.Translator(
            model,
            kt.SubwordTokenizer.load(tokenizer_path),
            args.beam_size,
            args.alpha,
            args.extra_length,
        )
        version_dir = export_for_serving(translator, args.export_dir, args.version)
    except (ValueError, FileExistsError) as error:
        console.fail(error)
    print(f"exported {args.model} to {version_dir}")


if __name__ == "__main__":
    main()
