"""Translate with an exported SavedModel, loaded with only tensorflow and tensorflow_text.

python -m serving.translate --model exports/transformer "Guten Morgen."
echo "Guten Morgen." | python -m serving.translate --model exports/transformer
"""

import argparse
import pathlib
import sys

from serving.packaging import latest_version
from training.console import add_verbose_flag


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m serving.translate",
        description="Translate sentences with an exported model (its serving_default signature).",
    )
    parser.add_argument(
        "--model",
        type=pathlib.Path,
        required=True,
        help="a version directory, or a model base directory (its highest version is used)",
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
    try:
        version_dir = latest_version(args.model)
    except FileNotFoundError as error:
        parser.exit(1, f"error: {error}\n")

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the graph uses)

    translate = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    outputs = translate(sentences=tf.constant(sentences, tf.string))
    for text, score in zip(outputs["translation"].numpy(), outputs["score"].numpy()):
        line = text.decode("utf-8")
        print(f"{score:.4f}\t{line}" if args.scores else line)


if __name__ == "__main__":
    main()
