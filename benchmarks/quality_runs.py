"""The quality study's runs (benchmarks/quality.py declares them): how a run is trained and
scored, and whether a recorded result counts for it."""

import dataclasses
import hashlib
import json

SCREEN_MINUTES, FULL_MINUTES = 14, 14  # a screening run's budget (--minutes); the demo's budget
# Bumped when the code a run measures changes its speed or results: results of an earlier version
# stay in the report but do not count as done.
STUDY_VERSION = 2
CHECKPOINT_EVERY, CHECKPOINTS_KEPT = 25, 20
# The demo's settings before the study: the small preset, an 8000-piece vocabulary, 3000 tokens
# per batch side, 800 warm-up steps, greedy validation BLEU every 200 steps.
DEMO_FLAGS = (
    *("--preset", "small", "--vocab-size", "8000", "--steps", "2000"),
    *("--steps-per-epoch", "200", "--bleu-sentences", "200"),
)
# A decoding: (beam, alpha, checkpoints averaged[, min_length]); without a min_length, 0 (see
# decoding_settings). The demo's before the study: beam 4, alpha 0.6 (§6.1), 5 averaged.
DEMO_DECODING = (4, 0.6, 5)
SCREEN_DECODINGS = ((1, 0.0, 5), DEMO_DECODING)  # greedy beside the demo's


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run of the study: `flags` added to the demo's, `decodings` (beam, alpha,
    checkpoints averaged[, min_length]) scored on validation; `test`, the decoding chosen on
    validation, scores the test split too (only on the runs that confirm the chosen settings).
    Decodings added to a finished run are scored without training it again. `curve`: minutes
    at which the run is also scored as if its budget had ended there (the checkpoints written
    by then), with `curve_decodings` and `test`; it needs a `budget` that ends the run and
    every checkpoint kept (`kept`)."""

    name: str
    lever: str
    flags: tuple = ()
    full_budget: bool = False
    seed: int = 0
    decodings: tuple = SCREEN_DECODINGS
    test: tuple = ()
    budget: float | None = None  # minutes, where a run's budget is its lever
    kept: int = CHECKPOINTS_KEPT
    curve: tuple = ()
    curve_decodings: tuple = ()

    def __post_init__(self):
        if self.curve and not (self.budget and max(self.curve) < self.budget):
            raise ValueError(f"{self.name}: a curve needs a budget beyond its last minute")

    def minutes(self, screen_minutes):
        if self.budget:
            return self.budget
        return FULL_MINUTES if self.full_budget else screen_minutes

    def training_flags(self, minutes):
        return (
            *DEMO_FLAGS,
            *self.flags,
            *("--seed", str(self.seed), "--max-minutes", f"{minutes:g}"),
            *("--checkpoint-every", str(CHECKPOINT_EVERY), "--keep-checkpoints", str(self.kept)),
        )

    def definition(self, minutes):
        """How the run is trained and scored; a result counts for the run when it was trained
        so (`trained_as`), and is scored on what it lacks (`missing`)."""
        return {
            "training_flags": list(self.training_flags(minutes)),
            "decodings": [list(d) for d in self.decodings],
            "version": STUDY_VERSION,
        }

    def tasks(self, decodings=None):
        """The (split, decoding) pairs this run scores: `decodings` (default: the run's) on
        validation, and its test decoding on test."""
        validation = self.decodings if decodings is None else decodings
        return [("validation", d) for d in validation] + (
            [("test", self.test)] if self.test else []
        )

    def missing(self, result):
        """(minutes, split, decoding) of the tasks `result` (a finished run's) has no score for:
        minutes None for the run's own, a minute of its curve for that prefix's."""
        asked = [d for _, d in self.tasks(self.decodings + self.curve_decodings)]
        prefixes = {p["minutes"]: p["scores"] for p in result.get("prefixes", ())}
        wanted = [(None, scored(result["scores"], asked), self.tasks())] + [
            (minutes, scored(prefixes.get(minutes, ()), asked), self.tasks(self.curve_decodings))
            for minutes in self.curve
        ]
        return [
            (minutes, split, decoding)
            for minutes, done, tasks in wanted
            for split, decoding in tasks
            if (split, decoding_settings(decoding)) not in done
        ]

    def tokenizer_key(self):
        """Runs with the same vocabulary size and training text share one trained tokenizer: the
        key names the corpus (for Ding, the parser's version, which changes its text) and how
        it is mixed."""
        flags = self.training_flags(0)
        dataset = flag_value(flags, "--dataset", "ding")
        if dataset == "ding":
            from keras_transformer.data import ding

            corpus = f"ding{ding.PARSER_VERSION}"
        else:  # another dataset: its kind, and a digest of its spec for a short file name
            digest = hashlib.sha256(dataset.encode()).hexdigest()[:8]
            corpus = f"{dataset.partition(':')[0]}-{digest}"
        mix = (
            f"phrases-x{flag_value(flags, '--sentence-repeats', 1)}"
            + ("-tagged" if "--tag-phrases" in flags else "")
            + ("-alternatives" if "--sentence-alternatives" in flags else "")
            if "--phrases" in flags
            else "sentences"
        )
        model = flag_value(flags, "--subword-model", "bpe")
        return f"{corpus}-{mix}-{flag_value(flags, '--vocab-size')}" + (
            "" if model == "bpe" else f"-{model}"
        )


def scored(scores, asked):
    """{(split, decoding settings)} that `scores` hold. A score records the decoding it was
    asked for; one recorded before it did is matched to the decoding of `asked` it was (a run
    that wrote fewer checkpoints averaged fewer than asked)."""
    return {
        (s["split"], tuple(s["decoding"]) if "decoding" in s else guessed(s, asked)) for s in scores
    }


def guessed(score, asked):
    """The decoding settings of `asked` that gave `score`: the same beam, alpha and minimum
    length, and as many checkpoints averaged, or more asked than were written."""
    beam, alpha, averaged, min_length = decoding_key(score)
    alike = [
        settings
        for settings in map(decoding_settings, asked)
        if (settings[0], settings[1], settings[3]) == (beam, alpha, min_length)
    ]
    exact = [settings for settings in alike if settings[2] == averaged]
    more = sorted(settings for settings in alike if settings[2] > averaged)
    return (exact or more or [decoding_key(score)])[0]


def decoding_settings(decoding):
    """(beam, alpha, checkpoints averaged, min_length) of a run's decoding; min_length 0 (eos
    allowed first) when a decoding does not say."""
    return (*decoding, 0)[:4]


def decoding_key(score):
    return (score["beam"], score["alpha"], score["averaged"], score.get("min_length", 0))


def without_flag(flags, name):
    """`flags` less the option `name` and its value."""
    drop = {i for i, flag in enumerate(flags[:-1]) if flag == name}
    return [flag for i, flag in enumerate(flags) if i not in drop and i - 1 not in drop]


def flag_value(flags, name, default=None):
    """The last value given to the option `name` in `flags`."""
    values = [flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag == name]
    return values[-1] if values else default


def trained_as(definition):
    """What of a run's definition its training depends on: the flags and the study's version."""
    return {k: definition.get(k) for k in ("training_flags", "version")}


def result_of(run, work_dir, minutes, recorded=()):
    """The run's result if it was trained as the study now defines it, with this budget: its
    RUN_DIR/result.json, else the one in `recorded` (the report's raw results: a study continued
    in a fresh checkout); else None. Its scores may lack decodings added since
    (`Run.missing`)."""
    path = work_dir / run.name / "result.json"
    found = ([json.loads(path.read_text())] if path.is_file() else []) + [
        r for r in recorded if r["name"] == run.name
    ]
    wanted = trained_as(run.definition(run.minutes(minutes)))
    return next((r for r in found if trained_as(r.get("definition", {})) == wanted), None)


def results(study, work_dir, minutes, recorded=()):
    """The results of the runs of `study` that count for them (`result_of`)."""
    return [result for run in study if (result := result_of(run, work_dir, minutes, recorded))]
