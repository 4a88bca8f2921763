"""Score translations (forced decoding): log P(translation | source) of each line of --target
given the same line of --source, with an exported model (its `score` signature), a CTranslate2
model (score_batch) or a .keras model; one score per line.

python -m serving.score --model exports/transformer --source de.txt --target en.txt
python -m serving.score --model runs/demo/model.keras --source de.txt --target en.txt --tokens
"""

import sys

from keras_transformer_cli import console, flags


def build_parser():
    parser = flags.parser(__doc__, "serving.score")
    flags.add_model(parser, "saved_model", "ctranslate2", "keras", "checkpoint")
    flags.add_source(parser, required=True)
    flags.add_targets(parser, required=True)
    flags.add_score_format(parser)
    flags.add_alpha(parser, default=None)
    flags.add_output(parser, "the scores (default: standard output)")
    return parser


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)
    from keras_transformer_cli.files import write_text_atomically
    from keras_transformer_cli.translators import refuse_cut_inputs, translator_for

    try:
        sources = flags.read_flag_lines(args.source, "--source")
        targets = flags.read_targets(args, sources)
        translator = translator_for(args.model, args.tokenizer, alpha=args.alpha)
        scored = translator.score(sources, targets)
        refuse_cut_inputs(args, translator, scored)
    except ValueError as error:
        console.fail(error)
    lines = [result.line(args.normalized, args.tokens) + "\n" for result in scored]
    if args.output:
        write_text_atomically(args.output, "".join(lines))
        print(f"wrote {len(lines)} scores to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write("".join(lines))


if __name__ == "__main__":
    main()
