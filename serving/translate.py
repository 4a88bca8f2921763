"""Translate with an exported SavedModel, loaded with only tensorflow and tensorflow_text, or
with a CTranslate2 model (`serving.ctranslate2`).

python -m serving.translate --model exports/transformer "Guten Morgen."
echo "Guten Morgen." | python -m serving.translate --model exports/transformer
python -m serving.translate --engine ctranslate2 --model exports/ct2 "Guten Morgen."
"""

import argparse
import pathlib
import sys

from serving.packaging import latest_version
from training.console import add_verbose_flag


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m serving.translate",
        description="Translate sentences with an exported model (its serving_default signature) "
        "or a CTranslate2 model.",
    )
    parser.add_argument(
        "--model",
        type=pathlib.Path,
        required=True,
        help="a version directory, or a model base directory (its highest version is used); "
        "with --engine ctranslate2, the directory serving.ctranslate2 wrote",
    )
    parser.add_argument(
        "--engine",
        default="tensorflow",
        choices=("tensorflow", "ctranslate2"),
        help="tensorflow: the SavedModel's own beam search; ctranslate2: CTranslate2's, with "
        "--beam-size and --alpha (default: tensorflow)",
    )
    parser.add_argument(
        "--beam-size", type=int, default=4, help="ctranslate2 only: beam width (default: 4)"
    )
    parser.add_argument(
        "--alpha", type=float, default=0.6, help="ctranslate2 only: length penalty (default: 0.6)"
    )
    parser.add_argument(
        "--scores", action="store_true", help="print each translation's score before it"
    )
    parser.add_argument(
        "sentences", nargs="*", help="sentences to translate (default: one per line on stdin)"
    )
    add_verbose_flag(parser)
    args = parser.parse_args(argv)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    if args.engine == "ctranslate2":
        return translate_with_ctranslate2(parser, args, sentences)
    try:
        version_dir = latest_version(args.model)
    except FileNotFoundError as error:
        parser.exit(1, f"error: {error}\n")

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the graph uses)

    translate = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    outputs = translate(sentences=tf.constant(sentences, tf.string))
    texts = [text.decode("utf-8") for text in outputs["translation"].numpy()]
    print_translations(args, zip(texts, outputs["score"].numpy()))


def translate_with_ctranslate2(parser, args, sentences):
    from serving.ctranslate2 import CTranslate2Translator

    try:
        translator = CTranslate2Translator(args.model, args.beam_size, args.alpha)
    except FileNotFoundError as error:
        parser.exit(1, f"error: {error}\n")
    print_translations(args, translator.translate(sentences))


def print_translations(args, translations):
    for line, score in translations:
        print(f"{score:.4f}\t{line}" if args.scores else line)


if __name__ == "__main__":
    main()
