"""The programs' flag vocabulary: one name, one definition and one help text per concept.

--run-dir      a training run's directory              --export-dir  a TF Serving base directory
--output       the file or directory a program writes  --model       a trained model (kinds below)
--tokenizer    a sentencepiece model                   --data-dir    where corpora are kept
--source       a file of sentences, one per line       --beam-size, --alpha, --extra-length: §6.1
--target       their translations, one per line        --target-prefix  how translations start

A flag shared by several programs is an `Option`: `Option.add` puts it in a program's parser,
`Option.field` makes it a field of a dataclass of settings (training's `TrainingPlan`), whose
parser `add_dataclass` generates and whose values `from_namespace` reads back.
"""

import argparse
import dataclasses
import math
import pathlib

from keras_transformer_cli import console

# What --model can name; each program lists the kinds it reads.
MODEL_KINDS = {
    "keras": "a .keras model",
    "checkpoint": "a run's step checkpoint (.weights.npz)",
    "saved_model": "a SavedModel directory (a version, or the base directory: its highest "
    "version, decoding as it was exported)",
    "ctranslate2": "a CTranslate2 directory (serving.ctranslate2)",
}
DATASET_HELP = "ding, tfds:NAME, folder:DIR, tsv:DIR or binarized:DIR (python -m training.binarize)"


class HelpFormatter(argparse.HelpFormatter):
    """Appends an option's default to its help, unless the help already states it."""

    def _get_help_string(self, action):
        if action.default in (None, False, True, [], argparse.SUPPRESS) or "default" in action.help:
            return action.help
        return action.help + " (default: %(default)s)"


@dataclasses.dataclass(frozen=True)
class Option:
    """One flag, defined once: its name, help and argparse settings (`type` parses and checks
    the text: `COUNT`, `at_least`, ...). `add` puts it in a parser, `field` in a dataclass."""

    flag: str
    help: str
    type: object = None
    default: object = None
    choices: tuple | None = None
    metavar: str | None = None
    action: str | None = None
    dest: str | None = None
    required: bool = False

    @property
    def attribute(self):
        """The name of its value in the parsed Namespace."""
        return self.dest or self.flag.removeprefix("--").replace("-", "_")

    def add(self, parser, **changes):
        """Adds the flag to `parser` (a parser or an argument group); `changes` are argparse
        settings a program gives it otherwise (its own default, required)."""
        given = {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name != "flag" and getattr(self, field.name) is not None
        }
        parser.add_argument(self.flag, **{**given, **changes})

    def field(self, exclusive=False, **changes):
        """A dataclass field set by this flag (`changes`: its settings there), defaulting to
        the flag's default; `add_dataclass` adds the flag. The `exclusive` fields of a dataclass
        exclude each other on the command line."""
        option = dataclasses.replace(self, **changes)
        metadata = {"option": option, "exclusive": exclusive}
        if option.required:
            return dataclasses.field(metadata=metadata)
        if isinstance(option.default, list):  # a repeatable flag's: each instance its own
            return dataclasses.field(default_factory=option.default.copy, metadata=metadata)
        return dataclasses.field(default=option.default, metadata=metadata)


def section(cls, title):
    """A dataclass field holding the settings of the dataclass `cls`, whose flags
    `add_dataclass` puts in an argument group named `title`."""
    return dataclasses.field(default_factory=cls, metadata={"title": title})


def add_dataclass(parser, cls):
    """Adds the flag of each field of the dataclass `cls` (`Option.field`) to `parser`, in the
    fields' order; a `section`'s flags in an argument group of their own, the `exclusive` ones
    of a dataclass in one mutually exclusive group."""
    exclusive = None
    for field in dataclasses.fields(cls):
        if "title" in field.metadata:
            add_dataclass(parser.add_argument_group(field.metadata["title"]), field.default_factory)
        elif "option" not in field.metadata:
            raise TypeError(
                f"{cls.__name__}.{field.name} has no flag: declare it with Option.field"
            )
        elif field.metadata["exclusive"]:
            exclusive = exclusive or parser.add_mutually_exclusive_group()
            field.metadata["option"].add(exclusive)
        else:
            field.metadata["option"].add(parser)


def from_namespace(cls, args):
    """The dataclass `cls` of the values in `args`, parsed by a parser of `add_dataclass`."""
    values = {}
    for field in dataclasses.fields(cls):
        if "title" in field.metadata:
            values[field.name] = from_namespace(field.default_factory, args)
        else:
            values[field.name] = getattr(args, field.metadata["option"].attribute)
    return cls(**values)


def at_least(minimum, kind=int):
    """An argparse type: a number of `kind` no smaller than `minimum`; anything else is a
    usage error naming the flag and the range (argparse adds the flag)."""

    def number(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {_range(kind, minimum)}, got {text!r}"
            ) from None
        if not minimum <= value < math.inf:  # NaN and infinity too
            raise argparse.ArgumentTypeError(f"expected {_range(kind, minimum)}, got {text}")
        return value

    number.__name__ = kind.__name__  # argparse names the type in some messages
    return number


def positive(text):
    """An argparse type: a float above 0 (a time, a temperature of sampling's)."""
    return _float_within(text, lambda value: 0 < value < math.inf, "a number above 0")


def probability(text):
    """An argparse type: a float in (0, 1]."""
    return _float_within(text, lambda value: 0 < value <= 1, "a number in (0, 1]")


def fraction(text):
    """An argparse type: a float in [0, 1) (a dropout probability; 0: none)."""
    return _float_within(text, lambda value: 0 <= value < 1, "a number in [0, 1)")


def _float_within(text, inside, expected):
    """The float of `text` where `inside(value)` (False for NaN), else a usage error saying
    what was `expected`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not inside(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
    return value


def port(text):
    """An argparse type: a TCP port, 1 to 65535."""
    value = COUNT(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {text}")
    return value


def _range(kind, minimum):
    return f"{'an integer' if kind is int else 'a finite number'} of at least {minimum}"


VOCAB_MINIMUM = 261  # 4 special ids, 256 byte pieces and one more (SubwordTokenizer.train)
DEFAULT_VOCAB_SIZE = 8000  # pieces of a vocabulary trained without --vocab-size
COUNT = at_least(1)  # steps, sizes, repetitions: zero means nothing
AMOUNT = at_least(0)  # may be none: 0 sentences, 0 retries, 0 extra tokens


def parse(parser, argv=None):
    """The program's flags, parsed, and its console started (`console.start`), before it
    imports TensorFlow."""
    args = parser.parse_args(argv)
    console.start(args.verbose)
    return args


def parser(doc, prog):
    """A program's parser, described by the first paragraph of its module's `doc`, with the
    shared --verbose; its usage names the command as it was run: the installed `kt-...` one, or
    `python -m MODULE`."""
    description = " ".join(doc.split("\n\n")[0].split())
    made = argparse.ArgumentParser(
        prog=console.installed_command() or f"python -m {prog}",
        description=description,
        formatter_class=HelpFormatter,
    )
    made.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's C++ log lines (hidden by default; a TF_CPP_MIN_LOG_LEVEL set "
        "in the environment decides instead)",
    )
    return made


RUN_DIR = Option(
    "--run-dir",
    type=pathlib.Path,
    required=True,
    help="the training run's directory (run.json, tokenizer.model, checkpoints/, backup/, "
    "logs/, model.keras), e.g. runs/demo",
)
EXPORT_DIR = Option(
    "--export-dir",
    type=pathlib.Path,
    required=True,
    help="TensorFlow Serving's base directory for the model, one numbered version "
    "directory per export, e.g. exports/transformer (training: default RUN_DIR/export)",
)


def add_run_dir(parser, required=True):
    RUN_DIR.add(parser, required=required)


def add_export_dir(parser, required=True):
    EXPORT_DIR.add(parser, required=required)


def add_output(parser, what, required=False, **options):
    """--output: where the program writes `what` (`options`: argparse's, e.g. a default)."""
    parser.add_argument(
        "--output",
        type=pathlib.Path,
        required=required,
        help=f"where to write {what}",
        **{"default": None, **options},
    )


def add_model(parser, *kinds):
    """--model, of the `kinds` the program reads, and its --tokenizer."""
    parser.add_argument(
        "--model",
        type=pathlib.Path,
        required=True,
        help="the trained model: " + ", ".join(MODEL_KINDS[kind] for kind in kinds),
    )
    add_tokenizer(parser)


TOKENIZER = Option(
    "--tokenizer",
    type=pathlib.Path,
    help="a sentencepiece model: training uses it instead of training one; the other "
    "programs read the model's (default: tokenizer.model beside the model or in its run "
    "directory)",
)


def add_tokenizer(parser):
    TOKENIZER.add(parser)


# §6.1's search: beam 4, length penalty alpha 0.6, at most the source length + 50 tokens.
BEAM_SIZE = Option(
    "--beam-size", type=COUNT, default=4, help="beam width; 1: greedy search (§6.1: 4)"
)
ALPHA = Option(
    "--alpha",
    type=at_least(0.0, float),
    default=0.6,
    help="length penalty ((5+|Y|)/6)^alpha (§6.1: 0.6)",
)
EXTRA_LENGTH = Option(
    "--extra-length",
    type=AMOUNT,
    default=50,
    help="a translation is at most source length + this many tokens (§6.1: 50)",
)
SEARCH_DEFAULTS = {option.attribute: option.default for option in (BEAM_SIZE, ALPHA, EXTRA_LENGTH)}


def add_search(parser, exported_own=False):
    """Beam search's settings (§6.1). With `exported_own` (programs that also read a SavedModel,
    whose search is part of its graph) they default to None: a SavedModel's own, else §6.1's."""
    own = " (a SavedModel searches as it was exported: giving another is refused)"
    changes = {"default": None} if exported_own else {}
    BEAM_SIZE.add(parser, **changes, help=BEAM_SIZE.help + (own if exported_own else ""))
    ALPHA.add(parser, **changes)
    EXTRA_LENGTH.add(parser, **changes)


def add_alpha(parser, default=ALPHA.default):
    ALPHA.add(parser, default=default)


def add_table(group, *rows):
    """Flags given as rows (flag, type, default, help): a program's own options."""
    for flag, kind, default, text in rows:
        group.add_argument(flag, type=kind, default=default, help=text)


DATASET = Option("--dataset", default="ding", help=DATASET_HELP)
NO_DOWNLOAD = Option(
    "--no-download",
    dest="download",
    action="store_false",
    default=True,
    help="never download a tfds dataset (it must be prepared in --data-dir)",
)
SOURCE_LANGUAGE = Option(
    "--source-language", help="source side (Ding: de or en; folder:DIR needs it)"
)
TARGET_LANGUAGE = Option("--target-language", help="target side (folder:DIR needs it)")
DATA_DIR = Option(
    "--data-dir",
    type=pathlib.Path,
    help="where corpora are kept: the tfds data directory, or the Ding corpus's (default: "
    "$KERAS_TRANSFORMER_CACHE or ~/.cache/keras_transformer)",
)


def add_dataset(parser):
    for option in (DATASET, NO_DOWNLOAD, SOURCE_LANGUAGE, TARGET_LANGUAGE, DATA_DIR):
        option.add(parser)


def add_data_dir(parser):
    DATA_DIR.add(parser)


def add_sentences(parser):
    """Sentences as arguments, or --source FILE, or standard input."""
    parser.add_argument(
        "sentences", nargs="*", help="sentences to translate (else --source, else stdin)"
    )
    add_source(parser)


SOURCE = Option(
    "--source", type=pathlib.Path, help="a UTF-8 file of source sentences, one per line"
)
TARGET = Option(
    "--target",
    type=pathlib.Path,
    help="a UTF-8 file of translations of the source sentences, one per line, to score "
    "(forced decoding: log P(translation | source))",
)


def add_source(parser, required=False):
    SOURCE.add(parser, required=required)


TARGET_PREFIX = Option(
    "--target-prefix",
    metavar="TEXT",
    help="every translation starts with TEXT and goes on from it (interactive or "
    "constrained translation); its log-probabilities count in the score",
)


def add_target_prefix(parser):
    TARGET_PREFIX.add(parser)


N_BEST = Option(
    "--n-best",
    type=COUNT,
    metavar="N",
    help="print each sentence's N best translations, best first, one per line: "
    "INDEX<TAB>SCORE<TAB>TRANSLATION (INDEX: the sentence's, from 0); at most the beam size",
)


def add_n_best(parser):
    N_BEST.add(parser)


def add_targets(parser, required=False):
    TARGET.add(parser, required=required)


def add_score_format(parser):
    """How scores are written: log P, or over the length penalty; token scores too."""
    parser.add_argument(
        "--normalized",
        action="store_true",
        help="write log P over GNMT's length penalty ((5 + |Y|) / 6)^alpha, the score beam "
        "search ranks by (alpha: --alpha, or a SavedModel's own), instead of log P",
    )
    parser.add_argument(
        "--tokens",
        action="store_true",
        help="after each score, the log-probability of each target token, eos last",
    )


def read_targets(args, sources):
    """The lines of --target, one per source sentence; ValueError naming the files when the
    counts differ."""
    targets = read_flag_lines(args.target, "--target")
    if len(targets) != len(sources):
        raise ValueError(
            f"--target {args.target} has {len(targets)} lines for {len(sources)} source "
            "sentences: give one translation per source line"
        )
    return targets


def add_scores(parser):
    parser.add_argument(
        "--scores", action="store_true", help="print each translation's score before it"
    )


def add_batch_size(parser, default):
    parser.add_argument(
        "--batch-size", type=COUNT, default=default, help="sentences translated together"
    )


SEED = Option(
    "--seed",
    type=AMOUNT,
    default=0,
    help="the random seed (training: weights, dropout, data order; sampling: the draws)",
)
JIT_COMPILE = Option(
    "--jit-compile",
    action="store_true",
    default=False,
    help="compile with XLA (training: the step, always under KERAS_BACKEND=jax; "
    "translating: the search of a .keras model or checkpoint)",
)


def add_seed(parser):
    SEED.add(parser)


def add_jit_compile(parser):
    JIT_COMPILE.add(parser)


def read_sentences(args, stdin):
    """The sentences of `add_sentences`: the arguments, else --source, else `stdin`; one per
    line of a file or stdin (`keras_transformer.data.corpus.split_lines`: lines end at \\n
    only); ValueError naming the argument, file or line that is not UTF-8."""
    from keras_transformer.data.corpus import split_lines

    if args.sentences and args.source:
        raise ValueError("give sentences as arguments or with --source, not both")
    if args.sentences:
        return argument_sentences(args.sentences)
    if args.source:
        return read_flag_lines(args.source, "--source")
    data = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode("utf-8")
    return split_lines(data, "standard input")


def argument_sentences(sentences):
    """The sentences given as arguments, whose bytes that are not UTF-8 arrive as surrogate
    escapes; ValueError naming the first that is not UTF-8."""
    decoded = []
    for number, sentence in enumerate(sentences, start=1):
        raw = sentence.encode("utf-8", "surrogateescape")
        try:
            decoded.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError(
                f"sentence {number} of the arguments: not UTF-8 ({raw!r}); give UTF-8 text"
            ) from None
    return decoded


def read_flag_lines(path, flag):
    """The sentences of the file `path` that `flag` names, one a line
    (`keras_transformer.data.corpus.read_lines`); ValueError naming `flag`, the file and the
    line when it cannot be read."""
    from keras_transformer.data.corpus import CorpusError, read_lines

    try:
        return read_lines(path)
    except CorpusError as error:
        raise ValueError(f"{flag} {error}") from None


PRESET = Option(
    "--preset",
    help="a Table 3 preset: tiny, small, base or big (small: a CPU model, narrowed by make demo)",
)


def add_presets(parser):
    """--preset, repeatable: the benchmarks measure several models."""
    PRESET.add(parser, action="append", help=PRESET.help + " (repeatable)")


def add_version(parser):
    parser.add_argument(
        "--version",
        type=COUNT,
        default=None,
        help="a TensorFlow Serving model version (export: default one more than the highest "
        "present; client: default the server's choice)",
    )


PHRASES = Option(
    "--phrases",
    action="store_true",
    default=False,
    help="Ding only: the dictionary's word and phrase pairs too (about 370,000), prepared "
    "as a split of their own (the other sentence pairs its sub-entries list as another: "
    "--sentence-alternatives) and trained on mixed with the sentence pairs",
)
SENTENCE_REPEATS = Option(
    "--sentence-repeats",
    type=COUNT,
    default=1,
    help="with --phrases: each sentence pair appears this many times per pass over the phrases",
)
TAG_PHRASES = Option(
    "--tag-phrases",
    action="store_true",
    default=False,
    help="with --phrases: each word and phrase pair's source begins with the tag <phrase> (a "
    "domain tag, Kobus et al., 2017), so that the model tells the dictionary's entries from "
    "sentences; what it translates has no tag and is translated as the sentences",
)
SENTENCE_ALTERNATIVES = Option(
    "--sentence-alternatives",
    action="store_true",
    default=False,
    help="with --phrases: the other sentence pairs each training sub-entry of the dictionary "
    "lists beside its first (its ';' synonyms and ' / ' sentences, about 2,800 pairs) are trained "
    "on as sentence pairs too, repeated with them; validation and test are unchanged",
)
VOCAB_SIZE = Option(
    "--vocab-size",
    type=at_least(VOCAB_MINIMUM),
    help=f"subword vocabulary trained on the training split (default {DEFAULT_VOCAB_SIZE})",
)
MAX_LENGTH = Option(
    "--max-length",
    type=at_least(2),  # a token and its bos or eos
    default=128,
    help="pairs longer than this many subword tokens, with their bos or eos, are dropped "
    "(and counted)",
)


def add_phrases(parser):
    PHRASES.add(parser)


def add_corpus_shaping(parser):
    """--sentence-repeats, --tag-phrases, --sentence-alternatives, --vocab-size and
    --max-length: how a corpus becomes training pairs (training.train, and training.binarize
    which does it once)."""
    for option in (SENTENCE_REPEATS, TAG_PHRASES, SENTENCE_ALTERNATIVES, VOCAB_SIZE, MAX_LENGTH):
        option.add(parser)


def add_quick(parser):
    """--quick: a benchmark's tiny setting."""
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes and few repetitions: a CPU, the tests"
    )


def add_parts(parser, parts):
    """--parts: what a benchmark measures, of `parts`."""
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=parts,
        default=None,
        help="measure only these parts (default: all)",
    )


MIXED_PRECISION = Option(
    "--mixed-precision",
    default="auto",
    help="the Keras dtype policy: off (float32), bf16 (mixed_bfloat16), fp16 "
    "(mixed_float16, training with loss scaling) or auto (training: bf16 on TPUs and "
    "Ampere+ GPUs; the benchmarks: bf16 with --gpu; else off)",
)


def add_mixed_precision(parser):
    MIXED_PRECISION.add(parser)
