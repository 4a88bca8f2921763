"""Fetch the Ding German-English dictionary (Debian package trans-de-en, GPL-2+), extract its
sentence pairs, split them and store them as a local TFDS dataset.

python -m training.prepare_ding
python -m training.prepare_ding --phrases      # also the dictionary's word and phrase pairs, and
                                               # the other sentence pairs its entries list
"""

import collections
import json
import pathlib

from keras_transformer_cli import console, flags


def build_parser():
    parser = flags.parser(__doc__, "training.prepare_ding")
    flags.add_data_dir(parser)
    parser.add_argument(
        "--ding-file",
        type=pathlib.Path,
        default=None,
        help="use this de-en dictionary file instead of fetching the package",
    )
    flags.add_phrases(parser)
    return parser


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)

    from keras_transformer.data import CorpusError, ding

    try:
        dataset_dir = ding.prepare(args.data_dir, args.ding_file, args.phrases)
    except CorpusError as error:
        console.fail(error)
    report = json.loads((dataset_dir / "report.json").read_text())
    skipped = collections.Counter(report["skipped"])
    print(f"Ding corpus from {report['source']}: {report['pairs']} pairs kept")
    for reason, count in skipped.most_common():
        print(f"  skipped {count:>7}  {reason}")
    print("  splits: " + ", ".join(f"{name} {count}" for name, count in report["splits"].items()))
    print(f"dataset written to {dataset_dir}")


if __name__ == "__main__":
    main()
