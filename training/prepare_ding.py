"""Fetch and prepare the embedded German-English corpus (what `make data` runs).

python -m training.prepare_ding
python -m training.prepare_ding --phrases      # also the dictionary's word and phrase pairs
"""

import argparse
import collections
import json
import pathlib

from training.console import add_verbose_flag


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m training.prepare_ding",
        description="Fetch the Ding German-English dictionary (Debian package trans-de-en, "
        "GPL-2+), extract its sentence pairs, split them and store them as a local TFDS dataset.",
    )
    parser.add_argument(
        "--cache-dir",
        type=pathlib.Path,
        default=None,
        help="where the package and the dataset are kept (default: $KERAS_TRANSFORMER_CACHE "
        "or ~/.cache/keras_transformer)",
    )
    parser.add_argument(
        "--ding-file",
        type=pathlib.Path,
        default=None,
        help="use this de-en dictionary file instead of fetching the package",
    )
    parser.add_argument(
        "--phrases",
        action="store_true",
        help="also store the dictionary's word and phrase pairs (about 370,000) as a split "
        "of their own, 'phrases' (training data only)",
    )
    add_verbose_flag(parser)
    args = parser.parse_args(argv)

    from keras_transformer.data import CorpusError, ding

    try:
        dataset_dir = ding.prepare(args.cache_dir, args.ding_file, args.phrases)
    except CorpusError as error:
        parser.exit(1, f"error: {error}\n")
    report = json.loads((dataset_dir / "report.json").read_text())
    skipped = collections.Counter(report["skipped"])
    print(f"Ding corpus from {report['source']}: {report['pairs']} pairs kept")
    for reason, count in skipped.most_common():
        print(f"  skipped {count:>7}  {reason}")
    print("  splits: " + ", ".join(f"{name} {count}" for name, count in report["splits"].items()))
    print(f"dataset written to {dataset_dir}")


if __name__ == "__main__":
    main()
