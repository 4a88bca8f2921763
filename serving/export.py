"""Write a SavedModel whose serving_default signature translates strings (beam search, §6.1; or
diverse beam search, --diverse-groups) into EXPORT_DIR/<version>/, the layout TensorFlow Serving
loads. With --jit-compile its search is one XLA-compiled function: TensorFlow Serving runs it
only when started with --xla_cpu_compilation_enabled=true, on a CPU (docs/serving.md).

python -m serving.export --model runs/demo/model.keras --export-dir exports/transformer
"""

from keras_transformer_cli import console, flags


def build_parser():
    parser = flags.parser(__doc__, "serving.export")
    flags.add_model(parser, "keras", "checkpoint")
    flags.add_export_dir(parser)
    flags.add_version(parser)
    flags.add_search(parser)
    flags.add_table(
        parser.add_argument_group("diverse beam search (Vijayakumar et al., 2016)"),
        ("--diverse-groups", flags.COUNT, 1, "split the beams into this many groups, each "
         "steered away from the tokens of the groups before it; it must divide --beam-size "
         "(1: beam search)"),
        ("--diversity", flags.at_least(0.0, float), 0.5, "the groups' penalty per beam of an "
         "earlier group that chose the same token at the same step"),
    )  # fmt: skip
    flags.JIT_COMPILE.add(
        parser,
        help="compile the search (the encoder and the decoding loop) as one XLA function; "
        "TensorFlow Serving runs it only when started with --xla_cpu_compilation_enabled=true, "
        "and its GPU build not at all (default: a plain graph, which any server runs)",
    )
    return parser


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)
    if args.beam_size % args.diverse_groups:
        console.fail(
            f"--diverse-groups {args.diverse_groups} does not divide --beam-size "
            f"{args.beam_size}: each group holds --beam-size / --diverse-groups beams"
        )

    import keras_transformer as kt
    from keras_transformer_cli import run_dir
    from keras_transformer_cli.versions import export_for_serving

    try:
        search = None
        if args.diverse_groups > 1:
            search = kt.DiverseBeam(args.beam_size, args.diverse_groups, args.diversity, args.alpha)
        model, tokenizer_path = run_dir.load_with_tokenizer(args.model, args.tokenizer)
        translator = kt.Translator(
            model,
            kt.SubwordTokenizer.load(tokenizer_path),
            args.beam_size,
            args.alpha,
            args.extra_length,
            search=search,
            jit_compile=args.jit_compile,
        )
        version_dir = export_for_serving(translator, args.export_dir, args.version)
    except (ValueError, FileExistsError) as error:
        console.fail(error)
    print(f"exported {args.model} to {version_dir}")


if __name__ == "__main__":
    main()
