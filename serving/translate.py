"""Translate sentences with an exported model (its serving_default signature), a CTranslate2 model
or a .keras model.

python -m serving.translate --model exports/transformer "Guten Morgen."
echo "Guten Morgen." | python -m serving.translate --model exports/transformer
python -m serving.translate --model exports/ct2 "Guten Morgen."
python -m serving.translate --model exports/transformer --target-prefix "Good" "Guten Morgen."
"""

import sys

from keras_transformer_cli import console, flags


def build_parser():
    parser = flags.parser(__doc__, "serving.translate")
    flags.add_model(parser, "saved_model", "ctranslate2", "keras", "checkpoint")
    flags.add_search(parser, exported_own=True)
    flags.add_scores(parser)
    flags.add_target_prefix(parser)
    flags.add_sentences(parser)
    return parser


@console.program
def main(argv=None, stdin=None):
    args = flags.parse(build_parser(), argv)
    from keras_transformer_cli.engines import load_engine

    try:
        sentences = flags.read_sentences(args, stdin or sys.stdin)
        engine = load_engine(
            args.model, args.tokenizer, args.beam_size, args.alpha, args.extra_length
        )
    except ValueError as error:
        console.fail(error)
    prefixes = None if args.target_prefix is None else [args.target_prefix] * len(sentences)
    try:
        translations = engine(sentences, prefixes)
        flags.refuse_cut(args, engine, translations)
    except ValueError as error:  # an export without the prefixed signature; an input too long
        console.fail(error)
    for translation in translations:
        text = translation.text
        print(f"{translation.score:.4f}\t{text}" if args.scores else text)


if __name__ == "__main__":
    main()
