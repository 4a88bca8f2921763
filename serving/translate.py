"""Translate sentences with an exported model (its serving_default signature), a CTranslate2 model
or a .keras model.

python -m serving.translate --model exports/transformer "Guten Morgen."
echo "Guten Morgen." | python -m serving.translate --model exports/transformer
python -m serving.translate --model exports/ct2 "Guten Morgen."
python -m serving.translate --model exports/transformer --target-prefix "Good" "Guten Morgen."
python -m serving.translate --model exports/transformer --n-best 3 "Guten Morgen."
"""

import sys

from keras_transformer_cli import console, flags


def build_parser():
    parser = flags.parser(__doc__, "serving.translate")
    flags.add_model(parser, "saved_model", "ctranslate2", "keras", "checkpoint")
    flags.add_search(parser, exported_own=True)
    flags.add_scores(parser)
    flags.add_n_best(parser)
    flags.add_target_prefix(parser)
    flags.add_sentences(parser)
    return parser


@console.program
def main(argv=None, stdin=None):
    args = flags.parse(build_parser(), argv)
    from keras_transformer.inference import TooManyHypotheses, check_n_best
    from keras_transformer_cli.translators import refuse_cut_inputs, translator_for

    try:
        sentences = flags.read_sentences(args, stdin or sys.stdin)
        translator = translator_for(
            args.model, args.tokenizer, args.beam_size, args.alpha, args.extra_length
        )
        check_n_best(args.n_best, translator.nbest, translator.description)
    except TooManyHypotheses as error:
        console.fail(
            f"--n-best {error.n_best}: {error.description} keeps the {error.kept} best "
            f"translations of each sentence; ask for at most {error.kept}, or search with "
            f"--beam-size {error.n_best} (an export: export it again with it)"
        )
    except ValueError as error:
        console.fail(error)
    prefixes = None if args.target_prefix is None else [args.target_prefix] * len(sentences)
    try:
        translations = translator.translate(sentences, n_best=args.n_best, target_prefix=prefixes)
        best = (
            translations if args.n_best is None else [hypotheses[0] for hypotheses in translations]
        )
        refuse_cut_inputs(args, translator, best)
    except ValueError as error:  # an export without the prefixed signature; an input too long
        console.fail(error)
    if args.n_best is not None:
        for index, hypotheses in enumerate(translations):
            for translation in hypotheses:
                print(f"{index}\t{translation.score:.4f}\t{translation.text}")
        return
    for translation in translations:
        text = translation.text
        print(f"{translation.score:.4f}\t{text}" if args.scores else text)


if __name__ == "__main__":
    main()
