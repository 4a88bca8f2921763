"""Train and score the study's settings on the Ding corpus, each for the same wall-clock budget,
and write benchmarks/QUALITY.md and benchmarks/QUALITY.json. Resumable: runs with a result are
skipped.

    python -m benchmarks.quality                    # every run of the study not yet done (hours)
    python -m benchmarks.quality --list             # the runs, and which are done
    python -m benchmarks.quality --only baseline    # some runs (names or levers)

Each run trains `python -m training.train`'s model from the demo's settings before the study with
one lever changed (or several, in the combined runs) for the same wall-clock budget, then
translates the validation split with each decoding setting of the run (beam size, length penalty
alpha, and how many of the last checkpoints, 25 steps apart, are averaged) and scores it with
sacrebleu (BLEU 13a, chrF, chrF++). Settings are chosen on validation only; the test split is
translated only for the runs marked to confirm the chosen settings. A run with a curve is also
scored as if its budget had ended earlier, with the checkpoints written by then.

Each run is a fresh process writing RUN_DIR/result.json; a run with a result for the same training
(there, or in benchmarks/QUALITY.json) is not trained again, so the study continues where it
stopped, also in a fresh checkout; decodings added to a finished run since are scored on its
kept checkpoints. After every run the table in benchmarks/QUALITY.md
(between its table markers; the text around them is kept) and benchmarks/QUALITY.json are
rewritten.
"""

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time

from keras_transformer_cli import console, flags
from keras_transformer_cli.run_dir import RunDirectory

REPORT = pathlib.Path("benchmarks/QUALITY.md")
TABLE_START, TABLE_END = (
    "<!-- quality table: written by benchmarks/quality.py -->",
    "<!-- end of the quality table -->",
)
SCREEN_MINUTES, FULL_MINUTES = (
    14,
    14,
)  # screening runs (--minutes); the demo's budget (make demo's DEMO_MINUTES)
# Bumped when the code a run measures changes its speed or results: results of an earlier version
# stay in the report but do not count as done. 2: the pooled host allocator and the cheaper loss.
STUDY_VERSION = 2
CHECKPOINT_EVERY, CHECKPOINTS_KEPT = 25, 20
# Today's demo (`make demo` before this study): the small preset, an 8000-piece vocabulary,
# 3000 tokens per batch side, 800 warm-up steps, greedy validation BLEU every 200 steps.
DEMO_FLAGS = (
    "--preset",
    "small",
    "--vocab-size",
    "8000",
    "--steps",
    "2000",
    "--steps-per-epoch",
    "200",
    "--bleu-sentences",
    "200",
)
# (beam, alpha, checkpoints averaged[, min_length]): without a min_length, 0 (see
# decoding_settings). DEMO_DECODING: beam 4, alpha 0.6 (§6.1), the last 5 checkpoints averaged.
DEMO_DECODING = (4, 0.6, 5)
SCREEN_DECODINGS = ((1, 0.0, 5), DEMO_DECODING)  # greedy (no length preference) beside the demo's
DECODINGS = (  # the decoding lever (beam, alpha, checkpoints averaged), on the runs that list it
    (1, 0.0, 5),
    (4, 0.6, 5),
    (4, 1.0, 5),
    (4, 1.5, 5),
    (4, 1.0, 1),
    (4, 1.0, 20),
)


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
            "--seed",
            str(self.seed),
            "--max-minutes",
            f"{minutes:g}",
            "--checkpoint-every",
            str(CHECKPOINT_EVERY),
            "--keep-checkpoints",
            str(self.kept),
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
            corpus = (
                f"{dataset.partition(':')[0]}-{hashlib.sha256(dataset.encode()).hexdigest()[:8]}"
            )
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


def without_flag(flags, name):
    """`flags` less the option `name` and its value."""
    drop = {i for i, flag in enumerate(flags[:-1]) if flag == name}
    return [flag for i, flag in enumerate(flags) if i not in drop and i - 1 not in drop]


def flag_value(flags, name, default=None):
    """The last value given to the option `name` in `flags`."""
    values = [flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag == name]
    return values[-1] if values else default


NARROW = ("--set", "d_model=128", "--set", "d_ff=512")
# Stage 2's common ground: every stage-1 lever that bought steps or BLEU at once (the narrower
# model, 2+2 layers, a 4000-piece vocabulary, no dropout), with the demo's 2000-step cap lifted
# so that the budget alone ends the run.
FAST = (
    *NARROW,
    "--set",
    "num_layers=2",
    "--vocab-size",
    "4000",
    "--set",
    "dropout=0.0",
    "--steps",
    "100000",
)
# Greedy, the demo's beam and a longer-preferring alpha, none ending a translation before its
# first token; and the demo's beam over the last 20 checkpoints (500 steps).
COMBINED = ((1, 0.0, 5, 1), (4, 0.6, 5, 1), (4, 1.0, 5, 1), (4, 0.6, 20, 1))
# Stage 3 adds longer-preferring alphas over the 20 checkpoints: beam search's output is 0.77-0.80
# of the references' length at alpha 0.6 (BLEU's brevity penalty), and alpha 1.0 lengthened it in
# every stage-2 run; at 1.5 the output ran on (1.26-1.77 of the references' length), so 1.2.
LONGER = ((4, 1.0, 20, 1), (4, 1.2, 20, 1), (4, 1.5, 20, 1))
LONGER_BEFORE_1_2 = ((4, 1.0, 20, 1), (4, 1.5, 20, 1))
STAGE_3 = COMBINED + LONGER

# What the study chose on validation, which `make demo` trains (the Makefile's DEMO_SETTINGS;
# tests/test_quality.py checks that they agree): the run, and the decoding, tested on two seeds of
# the run's flags (`...-faster-step-d-model-192` and its `-seed-1`, below).
# Stage 2 chose GROUND; stage 3 added ReLU dropout 0.1 to it, then an 8000-piece vocabulary, then
# 2000 tokens a batch with alpha 1.0 (each ahead on both seeds); on the slower machine, the last
# 10 checkpoints averaged instead of 20 (ahead on both seeds at 1600 steps, not behind along the
# curve up to 3500 steps); on the Zen 4 (about 3800 steps), the last 40 (ahead of 10 on both
# seeds: the `windows` runs); there (2026-11-28, night), label smoothing 0.2 instead of 0.1
# (ahead on both seeds with 40 averaged), then alpha 1.2 over the same 40 (ahead of 1.0 on both
# seeds); on the faster step of 2026-12-01 (about 7000 steps of the width 128 in 14 minutes,
# 4900 of 192), the width 192 (d_ff 768) instead of 128 (ahead on both seeds). BASE_RUN is the
# choice before label smoothing, the settings every lever of 2026-11-27 and 28 (`on_demo`) starts
# from; SMOOTHED_RUN the choice from 2026-11-28 to 2026-11-30, which the levers since start from;
# CHOSEN_RUN is the demo's.
GROUND = "fast-phrases-x10"
BASE_RUN = f"{GROUND}-relu-dropout-0.1-vocab-8k-batch-2000"
SMOOTHED_RUN = f"{BASE_RUN}-smoothing-0.2-windows"
WIDER_RUN = f"{SMOOTHED_RUN}-faster-step-d-model-192"
CHOSEN_RUN = WIDER_RUN
TEN_AVERAGED = (4, 1.0, 10, 1)
FORTY_AVERAGED = (4, 1.0, 40, 1)
CHOSEN_DECODING = (4, 1.2, 40, 1)
# The decoding chosen with 2000 tokens a batch (beam 4, alpha 1.0, the last 20 checkpoints): that
# choice's runs and the runs on it were scored and tested in it.
TWENTY_AVERAGED = (4, 1.0, 20, 1)
# The last 10, 20, 40 and 80 checkpoints (250 to 2000 steps) averaged, in the chosen search.
WINDOWS = (TEN_AVERAGED, TWENTY_AVERAGED, FORTY_AVERAGED, (4, 1.0, 80, 1))
# It over the last 5 and 10 checkpoints (125 and 250 steps): at 1600 steps the 20 averaged reach
# back nearly a third of a run whose validation BLEU still climbs fast.
FEWER_AVERAGED = ((4, 1.0, 5, 1), TEN_AVERAGED)
# The search around FORTY_AVERAGED (chosen then), over the same 40 checkpoints: alpha (its output
# was 0.87 of the references' length on test, which BLEU's brevity penalty charges), greedy and a
# wider beam. Alpha 1.2 among them became CHOSEN_DECODING.
FORTY_SEARCHES = ((4, 0.6, 40, 1), (4, 0.8, 40, 1), CHOSEN_DECODING, (4, 1.5, 40, 1))
FORTY_SEARCHES += ((1, 0.0, 40, 1), (8, 1.0, 40, 1))
# The chosen decoding over the last 80 and 160 checkpoints (2000 and 4000 steps): the windows a
# longer run may want.
WIDER_WINDOWS = ((4, 1.2, 80, 1), (4, 1.2, 160, 1))
# The decoding chosen in stage 2 and kept until the batch's choice (beam 4, alpha 0.6, the last 20
# checkpoints): the test split of every earlier choice was scored in it.
EARLIER_DECODING = (4, 0.6, 20, 1)
PHRASES = ("--phrases", "--sentence-repeats", "10")
# What stage 3 chose on GROUND before label smoothing 0.2.
STAGE_3_CHOICES = (
    "--set",
    "relu_dropout=0.1",
    "--vocab-size",
    "8000",
    "--tokens-per-batch",
    "2000",
)
BASE_FLAGS = (*FAST, *PHRASES, *STAGE_3_CHOICES)
SMOOTHING_0_2 = ("--set", "label_smoothing=0.2")
# SMOOTHED_FLAGS: the chosen run's flags from 2026-11-28 (night) to 2026-11-30, which the runs since
# start from. CHOSEN_FLAGS (CHOSEN_RUN's): what `make demo` trains.
SMOOTHED_FLAGS = (*BASE_FLAGS, *SMOOTHING_0_2)
WIDER_FLAGS = (*SMOOTHED_FLAGS, "--set", "d_model=192", "--set", "d_ff=768")
CHOSEN_FLAGS = WIDER_FLAGS


def on_demo(name, lever, *flags, **fields):
    """A run on the settings before label smoothing 0.2 (BASE_FLAGS) with `flags` added, scored
    with 20 and 10 checkpoints averaged unless `decodings` says otherwise."""
    fields.setdefault("decodings", (TWENTY_AVERAGED, TEN_AVERAGED))
    return Run(f"{BASE_RUN}-{name}", lever, (*BASE_FLAGS, *flags), **fields)


def on_demo_seeds(name, lever, *flags, seeds=(0, 1), **fields):
    """`on_demo` runs of one lever on `seeds`: `name` for seed 0, `name-seed-N` for seed N."""
    return tuple(
        on_demo(name if seed == 0 else f"{name}-seed-{seed}", lever, *flags, seed=seed, **fields)
        for seed in seeds
    )


def on_chosen(name, lever, *flags, **fields):
    """A stage-3 run: stage 2's chosen settings (GROUND) with `flags` added, scored in
    STAGE_3."""
    return Run(f"{GROUND}-{name}", lever, (*FAST, *PHRASES, *flags), decodings=STAGE_3, **fields)


STUDY = (
    # Today's demo settings; its decoding lever too.
    Run("baseline", "baseline", decodings=DECODINGS),
    # Learning rate (Eq. 3): warm-up and a scale on the whole curve. With 800 warm-up steps the
    # demo's rate is still rising when its budget ends.
    Run("warmup-200", "learning rate", ("--set", "warmup_steps=200")),
    Run("lr-x2", "learning rate", ("--set", "learning_rate_scale=2.0")),
    # Model shape: a narrower model takes more steps in the same time; fewer layers.
    Run("d128", "shape", NARROW),
    Run("layers-2", "shape", ("--set", "num_layers=2")),
    # Layer normalization before each sub-layer (not the paper's): trains stably at higher rates.
    Run("pre-norm", "shape", ("--set", "norm_first=true")),
    # Vocabulary size.
    Run("vocab-4k", "vocabulary", ("--vocab-size", "4000")),
    Run("vocab-2k", "vocabulary", ("--vocab-size", "2000")),
    # Tokens per batch (§5.1): half the demo's, twice the updates.
    Run("batch-1500", "batch", ("--tokens-per-batch", "1500")),
    # Regularization (§5.4). Label smoothing is studied on stage 2's ground (fast-smoothing-0),
    # where the model is trained enough for it to matter.
    Run("dropout-0", "regularization", ("--set", "dropout=0.0")),
    # Data: Ding's words and phrases, the sentences up-sampled.
    Run("phrases-x10", "data", ("--phrases", "--sentence-repeats", "10")),
    # Stage 2, combined.
    Run("fast", "combined", FAST, decodings=COMBINED),
    Run(
        "fast-phrases-x10", "combined", (*FAST, *PHRASES), decodings=COMBINED, test=EARLIER_DECODING
    ),
    # fast reached 2634 steps, many passes over the sentence pairs: it over-fits
    # (training accuracy 0.78, validation chrF flat from step 1200), so dropout comes back.
    Run("fast-dropout-0.1", "combined", (*FAST, "--set", "dropout=0.1"), decodings=COMBINED),
    Run("fast-dropout-0.3", "combined", (*FAST, "--set", "dropout=0.3"), decodings=COMBINED),
    # Both: the phrases make the sentence pairs repeat less, so the lighter dropout.
    Run(
        "fast-phrases-x10-dropout-0.1",
        "combined",
        (*FAST, *PHRASES, "--set", "dropout=0.1"),
        decodings=COMBINED,
    ),
    # The confirmation: stage 2's chosen run with a second seed (weights and data order; the same
    # tokenizer), both seeds scored on test in the chosen decoding.
    Run(
        f"{GROUND}-seed-1",
        "confirmation",
        (*FAST, *PHRASES),
        seed=1,
        decodings=COMBINED,
        test=EARLIER_DECODING,
    ),
    Run(
        "fast-smoothing-0", "combined", (*FAST, "--set", "label_smoothing=0.0"), decodings=COMBINED
    ),
    Run("fast-layers-3", "combined", (*FAST, "--set", "num_layers=3"), decodings=COMBINED),
    # Stage 3 (issue 39): subword regularisation on stage 2's ground, BPE-dropout at Provilkov
    # et al.'s 0.1 with two seeds, and a lighter 0.05; each to compare with fast-phrases-x10 and
    # its seed-1 twin.
    on_chosen("sampling-0.1", "subword sampling", "--subword-sampling", "0.1"),
    on_chosen("sampling-0.1-seed-1", "subword sampling", "--subword-sampling", "0.1", seed=1),
    on_chosen("sampling-0.05", "subword sampling", "--subword-sampling", "0.05"),
    # Stage 3, the low-resource levers (Araabi & Monz 2020) on stage 2's ground, one at a time:
    # depth first (3+3 layers beat 2+2 on the sentences alone, fast-layers-3).
    on_chosen("layers-3", "depth", "--set", "num_layers=3"),
    # The chosen run again, on the day of stage 3: the machine's matmul rate moves between days
    # (155 GFLOP/s on 2026-11-24, 255-278 on 2026-11-26), and so do the steps a run reaches.
    on_chosen("again", "same day"),
    # The other subword regularisation (Kudo, 2018): a unigram vocabulary, segmentations drawn
    # with probabilities P(x)^0.5 (milder than uniform: BPE-dropout 0.1 lost, 0.05 nearly tied).
    on_chosen(
        "unigram-sampling-0.5",
        "subword sampling",
        *("--subword-model", "unigram", "--subword-sampling", "0.5"),
    ),
    # The dropouts Araabi & Monz tune besides the residual one (which lost on this ground,
    # fast-phrases-x10-dropout-0.1): on the attention weights, on the FFN's hidden ReLU.
    on_chosen("attention-dropout-0.1", "attention dropout", "--set", "attention_dropout=0.1"),
    # ReLU dropout came out ahead of the chosen run by 0.25, within that run's seed spread (0.38),
    # and its second seed ahead of the chosen run's by 0.36: chosen, both seeds scored on test.
    on_chosen(
        "relu-dropout-0.1", "ReLU dropout", "--set", "relu_dropout=0.1", test=EARLIER_DECODING
    ),
    on_chosen(
        "relu-dropout-0.1-seed-1",
        "ReLU dropout",
        *("--set", "relu_dropout=0.1"),
        seed=1,
        test=EARLIER_DECODING,
    ),
    # On stage 3's choice (ReLU dropout 0.1): a stronger dose of it; then the levers not yet
    # tried on the phrase mixture, one at a time: label smoothing (§5.4) at twice the paper's 0.1
    # (without it the fast ground lost 0.6 BLEU), the vocabulary size and the width (stage 1
    # chose both on the sentences alone, where steps were scarcer).
    on_chosen("relu-dropout-0.2", "ReLU dropout", "--set", "relu_dropout=0.2"),
    on_chosen(
        "relu-dropout-0.1-smoothing-0.2",
        "label smoothing",
        *("--set", "relu_dropout=0.1", "--set", "label_smoothing=0.2"),
    ),
    on_chosen(
        "relu-dropout-0.1-vocab-8k",
        "vocabulary size",
        *("--set", "relu_dropout=0.1", "--vocab-size", "8000"),
        test=EARLIER_DECODING,
    ),
    # The 8000-piece vocabulary came out ahead (6.77 against 6.43 for the same seed, in 1869
    # steps against 2502), and its second seed too (6.74 against 6.16): chosen, both seeds
    # scored on test.
    on_chosen(
        "relu-dropout-0.1-vocab-8k-seed-1",
        "vocabulary size",
        *("--set", "relu_dropout=0.1", "--vocab-size", "8000"),
        seed=1,
        test=EARLIER_DECODING,
    ),
    # The width, the last lever declared and not run, moved onto the vocabulary's choice (it was
    # declared on ReLU dropout 0.1 with 4000 pieces): 192 wide, d_ff 4 x d_model as in the paper.
    on_chosen(
        "relu-dropout-0.1-vocab-8k-d192",
        "width",
        *("--set", "relu_dropout=0.1", "--vocab-size", "8000"),
        *("--set", "d_model=192", "--set", "d_ff=768"),
    ),
    # The vocabulary once more: 8000 pieces beat 4000 with the phrase pairs (stage 1, on the
    # sentences alone, had chosen 4000 over 8000), so twice as many again.
    on_chosen(
        "relu-dropout-0.1-vocab-16k",
        "vocabulary size",
        *("--set", "relu_dropout=0.1", "--vocab-size", "16000"),
    ),
    # The run is bounded by steps (its validation chrF still rising at the budget's end, 1869
    # steps), so what makes each step count: a shorter warm-up (Eq. 3 after it is unchanged; 800
    # steps are 43% of the run, while its rate is below the peak), smaller batches (more updates
    # of fewer tokens; stage 1 tried 1500 tokens on a model still in its warm-up).
    on_chosen(
        "relu-dropout-0.1-vocab-8k-warmup-400",
        "learning rate",
        *("--set", "relu_dropout=0.1", "--vocab-size", "8000", "--set", "warmup_steps=400"),
    ),
    on_chosen(
        "relu-dropout-0.1-vocab-8k-batch-2000",
        "batch",
        *("--set", "relu_dropout=0.1", "--vocab-size", "8000", "--tokens-per-batch", "2000"),
        test=TWENTY_AVERAGED,
    ),
    # 2000 tokens a batch reached 2875 steps and led the choice in chrF by 1.6 at its best
    # decoding (26.5 against 24.9), in BLEU by 0.19 (6.96, alpha 1.0), a tie in the chosen
    # decoding (6.61 against 6.77); a warm-up of 400 steps tied (6.94 at alpha 1.2, chrF 24.7).
    # The batch's second seed, and half the demo's batch (stage 1's 1500 tokens).
    on_chosen(
        "relu-dropout-0.1-vocab-8k-batch-2000-seed-1",
        "batch",
        *("--set", "relu_dropout=0.1", "--vocab-size", "8000", "--tokens-per-batch", "2000"),
        seed=1,
        test=TWENTY_AVERAGED,
    ),
    on_chosen(
        "relu-dropout-0.1-vocab-8k-batch-1500",
        "batch",
        *("--set", "relu_dropout=0.1", "--vocab-size", "8000", "--tokens-per-batch", "1500"),
    ),
    # 1500 tokens reached 3802 steps and 7.52 (alpha 1.0 and 1.2; 7.40 at 0.6), ahead of 2000
    # tokens on the same seed (6.96): its second seed.
    on_chosen(
        "relu-dropout-0.1-vocab-8k-batch-1500-seed-1",
        "batch",
        *("--set", "relu_dropout=0.1", "--vocab-size", "8000", "--tokens-per-batch", "1500"),
        seed=1,
    ),
    # Its second seed fell to 6.62 (alpha 1.0), below the old choice's; 2000 tokens, ahead on both
    # seeds (6.96 and 7.31 with alpha 1.0, which beat 0.6 on both), is chosen with alpha 1.0.
    # Where the curve goes (issue 39): stage 2's settings for 60 minutes, every checkpoint kept
    # so that the same run also gives the 14- and 30-minute points (the weights at a step do not
    # depend on the budget: the schedule and the data order depend on the step and the seed).
    # Its checkpoints were gone when alpha 1.2 joined LONGER, so it was scored in STAGE_3 without
    # alpha 1.2 (COMBINED and LONGER_BEFORE_1_2); `make quality` would otherwise score it again.
    Run(
        f"{GROUND}-60-minutes",
        "time budget",
        (*FAST, *PHRASES),
        decodings=COMBINED + LONGER_BEFORE_1_2,
        test=EARLIER_DECODING,
        budget=60,
        kept=5000,
        curve=(14, 30),
        curve_decodings=(EARLIER_DECODING, *LONGER_BEFORE_1_2),
    ),
    # The curve once more with stage 3's first choice (4000 pieces): ReLU dropout regularises, so
    # a longer budget may now buy what it did not above. Scored in the chosen decoding and alpha
    # 1.2, the decoding stage 3 left to confirm.
    Run(
        f"{GROUND}-relu-dropout-0.1-60-minutes",
        "time budget",
        (*FAST, *PHRASES, "--set", "relu_dropout=0.1"),
        decodings=(EARLIER_DECODING, (4, 1.2, 20, 1)),
        test=EARLIER_DECODING,
        budget=60,
        kept=5000,
        curve=(14, 30),
        curve_decodings=(EARLIER_DECODING, (4, 1.2, 20, 1)),
    ),
    # The curve with the settings `make demo` trained from 2026-11-27 until label smoothing 0.2
    # (8000 pieces, 2000 tokens a batch): the two curves above used the earlier ones.
    Run(
        f"{BASE_RUN}-60-minutes",
        "time budget",
        BASE_FLAGS,
        decodings=(TWENTY_AVERAGED, TEN_AVERAGED),
        test=TEN_AVERAGED,
        budget=60,
        kept=5000,
        curve=(14, 20, 25, 30),
        curve_decodings=(TWENTY_AVERAGED, *FEWER_AVERAGED),
    ),
    # On the slower machine (AMD EPYC, 1.8 times slower a step) the demo reaches 1600-1700 steps
    # in its 14 minutes, where its validation BLEU (4.70 at 1600 steps, the curve above) is still
    # climbing fast: what makes each step count for more there. First, Eq. 3's whole curve twice
    # as high (peak 0.0063 at step 800 for d_model 128), compared with the curve's first 14 minutes.
    on_demo("lr-x2", "learning rate", "--set", "learning_rate_scale=2.0"),
    # Twice the rate lost (3.77 against 4.70 at 1656 steps; its training loss behind from step
    # 1000): the other side of it, half the rate (peak 0.0016).
    on_demo("lr-x0.5", "learning rate", "--set", "learning_rate_scale=0.5"),
    # Half the rate lost too (3.63 at 1564 steps): Eq. 3 as it is stays. ReLU dropout was chosen
    # where runs reached 2500-2900 steps; in 1600 the model may not yet fit enough to need it.
    on_demo("relu-dropout-0", "ReLU dropout", "--set", "relu_dropout=0.0"),
    # Without ReLU dropout it tied (4.68 at 1623 steps). The data: 1600 steps are 0.56 of one
    # pass over the mixture (2833 batches), so each sentence pair is seen about 6 times and each
    # phrase pair about half a time; the sentences (what validation and test hold) twice as often.
    on_demo("sentence-repeats-20", "data", "--sentence-repeats", "20", test=TWENTY_AVERAGED),
    # Twenty repeats came out ahead (5.85 against 4.70, chrF 23.1 against 21.2, 1638 steps): its
    # second seed, and the chosen run's second seed again on this machine (its own ran on the
    # faster one, to 3040 steps), to compare with. Ahead on both seeds (5.75 against 4.85): its
    # test split scored for both, and chosen for `make demo` until its curve below.
    on_demo(
        "sentence-repeats-20-seed-1",
        "data",
        "--sentence-repeats",
        "20",
        seed=1,
        test=TWENTY_AVERAGED,
    ),
    # The averaging, on both seeds at 1600 steps and along the curve of ten: the last 10
    # checkpoints came out ahead of 20 on both seeds (5.01 and 5.41 against 4.70 and 4.85) and
    # were not behind along the curve up to 3500 steps (+0.18, +0.03 and +0.08 at 2325, 2925 and
    # 3500), though behind at its end (7.17 against 7.88 at 6947 steps, scored after the choice):
    # chosen, its test split scored on both seeds (the curve's first 14 minutes and this run).
    on_demo(
        "seed-1-again",
        "same machine",
        seed=1,
        decodings=(TWENTY_AVERAGED, *FEWER_AVERAGED),
        test=TEN_AVERAGED,
    ),
    # Where twenty repeats go with more steps, beside the curve of ten above (the same points).
    # Behind it from 2250 steps on (validation 5.98 against 6.35, 6.34 at 2825 against 7.31 at
    # 2925): ahead only before about 2000 steps, so the demo keeps ten.
    on_demo(
        "sentence-repeats-20-60-minutes",
        "time budget",
        "--sentence-repeats",
        "20",
        test=TWENTY_AVERAGED,
        budget=60,
        kept=5000,
        curve=(14, 20, 25, 30),
        curve_decodings=(TWENTY_AVERAGED,),
    ),
    # On a CPU with bfloat16 dot products (a Zen 4 AMD EPYC: AVX512_BF16), mixed bfloat16 took
    # 183-186 ms a step against 206-220 in float32 (`--steps 600`, in turn, twice): whether the
    # quality holds over the demo's 14 minutes (one seed; float32 is `make demo` on that machine).
    on_demo("bf16", "precision", "--mixed-precision", "bf16"),
    # `make demo` there (seed 0) reached 3737 steps and test BLEU 7.20: the second seed on the same
    # machine, to tell what the seed moves at that many steps.
    on_demo("seed-1-zen-4", "same machine", seed=1, test=TEN_AVERAGED),
    # At about 3700 steps neither seed reaches issue 39's 7.5: a lever must raise what a step
    # learns. Stage 1's pre-norm (layer normalization before each sub-layer) had scored higher in
    # the same 14 minutes (2.54 against 0.63; 550 against 416 steps, inside the warm-up) but was
    # not carried onto the fast ground: on the demo's.
    on_demo("pre-norm", "shape", "--set", "norm_first=true"),
    # Pre-norm scored lower (6.94 against 7.28 at 3665 steps; its training loss about 0.1 lower,
    # its validation BLEU not higher). The phrase pairs are dictionary entries, short and terse,
    # among the sentences that validation and test hold: a domain tag on their sources (Kobus et
    # al., 2017) lets the model learn the two apart.
    on_demo("tag-phrases", "data", "--tag-phrases"),
    # The tag scored lower (6.75 at 3832 steps). Twenty repeats led ten at 1600 steps and fell
    # behind from 2250 on (its curve above): the more steps, the fewer repeats pay. At this
    # machine's 3700 steps, five.
    on_demo("sentence-repeats-5", "data", "--sentence-repeats", "5"),
    # Five repeats came out ahead (7.71 against 7.28 at 3806 steps, 10 averaged; 7.18 with 20):
    # its second seed, beside the demo's seed 1 on this machine (7.05).
    on_demo("sentence-repeats-5-seed-1", "data", "--sentence-repeats", "5", seed=1),
    # Behind on seed 1 (6.79 against 7.05; 7.00 with 20 averaged): level on the mean (7.25
    # against 7.17) with four times the spread, so the demo keeps ten. The curve of these
    # settings flattens after about 3500 steps (7.60 and 7.88 with 20 averaged at 3500 and 6947):
    # more capacity where the model has the most room, the feed-forward network's width alone
    # (d192 had widened everything and lost 1489 steps against 1869).
    on_demo("d-ff-1024", "shape", "--set", "d_ff=1024"),
    # Lower in the demo's decoding (6.89 against 7.28 at 3070 steps: 0.27 s a step against 0.22;
    # 7.63 with 20 averaged). Pre-norm had fitted the mixture faster (its training loss about 0.1
    # lower all along) but scored lower; layer normalization before each sub-layer trains stably
    # at higher rates (Xiong et al., 2020), and twice Eq. 3's rate had lost only under post-norm
    # (at 1600 steps).
    on_demo(
        "pre-norm-lr-x2", "shape", "--set", "norm_first=true", "--set", "learning_rate_scale=2.0"
    ),
    # Level (7.09 at 3785 steps; its training loss lower still). The curve flattens after about
    # 3500 steps, where ReLU dropout had delayed the fall: a little dropout on the residual
    # connections too (§5.4; 0.1 had lost on the sentences at 2500 steps).
    on_demo("dropout-0.05", "regularization", "--set", "dropout=0.05"),
    # Level (7.29 at 3682 steps, chrF 27.1 against 26.5; 7.56 with 20 averaged).
    # The 10- and 20-checkpoint averages of one run differ by up to 0.74 BLEU at these steps
    # (d_ff 1024: 6.89 and 7.63): how wide a window the demo should average, on its own settings,
    # both seeds, every checkpoint of the last 2000 steps kept.
    on_demo("windows", "decoding", kept=80, decodings=WINDOWS, test=FORTY_AVERAGED),
    on_demo("windows-seed-1", "decoding", seed=1, kept=80, decodings=WINDOWS, test=FORTY_AVERAGED),
    # 40 averaged (1000 steps) came out ahead of the demo's 10 on both seeds (7.58 and 7.54
    # against 7.03 and 7.04; 20: 6.76 and 7.26, 80: 7.34 and 7.54): chosen, the test split scored
    # on both. At 1600 steps (the slower machine) 40 would reach back into the warm-up.
    # Mixed bfloat16 had reached 18% more steps on this machine (4428) and tied in the 10
    # averaged then chosen (7.27 against 7.28), ahead with 20 (7.67); whether the extra steps pay
    # in the 40 now chosen, on both seeds, in the same windows.
    on_demo("bf16-windows", "precision", "--mixed-precision", "bf16", kept=80, decodings=WINDOWS),
    on_demo(
        "bf16-windows-seed-1",
        "precision",
        *("--mixed-precision", "bf16"),
        seed=1,
        kept=80,
        decodings=WINDOWS,
    ),
    # With 40 averaged, bf16 (4595 and 4514 steps) came out ahead on seed 0 (8.48 against 7.58)
    # and behind on seed 1 (7.20 against 7.54): a third seed of both, declared before either
    # ran. bf16 is chosen if it is ahead on two of the three seeds and on their mean.
    on_demo("windows-seed-2", "decoding", seed=2, kept=80, decodings=WINDOWS),
    on_demo(
        "bf16-windows-seed-2",
        "precision",
        *("--mixed-precision", "bf16"),
        seed=2,
        kept=80,
        decodings=WINDOWS,
    ),
    # Behind on seed 2 (6.91 against 6.96, at 4553 and 4614 steps: the machine ran float32 as fast
    # as bf16 that hour): ahead on one seed of three, so float32 stays. Over the six runs 40
    # averaged (mean 7.45) and 80 (7.41) tie, ahead of 10 (7.08) and 20 (7.02): 40 stays.
    # Two regularizers that tied in the 10 averaged (residual dropout 0.05: 7.29 against 7.28,
    # chrF 27.1 against 26.5, 7.56 with 20 averaged; label smoothing 0.2 on stage 3's ground),
    # now in the 40 chosen, on seeds 0 and 1 beside `windows` and `windows-seed-1` (7.58 and
    # 7.54). Declared before they ran: a lever is chosen if it is ahead on both seeds with 40
    # averaged; if both are, the one with the higher mean.
    *on_demo_seeds(
        "dropout-0.05-windows",
        "regularization",
        "--set",
        "dropout=0.05",
        kept=80,
        decodings=WINDOWS,
    ),
    *on_demo_seeds(
        "smoothing-0.2-windows",
        "regularization",
        *("--set", "label_smoothing=0.2"),
        kept=80,
        decodings=(*WINDOWS, *FORTY_SEARCHES),
        test=CHOSEN_DECODING,
    ),
    # Residual dropout 0.05 is behind on both seeds with 40 averaged (7.46 and 7.29 at 3558 and
    # 3611 steps, the machine slower that evening: 231-234 ms a step). The wider feed-forward
    # network had scored float32's highest 20-averaged BLEU on the Zen 4 (7.63 at 3070 steps) and
    # fell behind only in the 10 averaged then chosen: in the 40 now chosen, seeds 0 and 1, with
    # the same rule, declared before they ran (ahead on both seeds with 40 averaged).
    *on_demo_seeds("d-ff-1024-windows", "shape", "--set", "d_ff=1024", kept=80, decodings=WINDOWS),
    # d_ff 1024: behind on seed 0 (7.33 at 3060 steps), ahead on seed 1 (7.71 at 2976). Label
    # smoothing 0.2 is ahead on both seeds (7.71 and 7.77 at 3850 and 3739 steps): chosen
    # (SMOOTHED_RUN), its test split scored on both seeds. Then the search on its two runs
    # (FORTY_SEARCHES, added to their decodings above), declared before it was scored: a search
    # replaces beam 4 with alpha 1.0 if it is ahead on both seeds with 40 averaged; of several,
    # the one with the higher mean. Their test split was scored with alpha 1.0 (FORTY_AVERAGED)
    # before the search.
    # Alpha 1.2 came out ahead on both seeds (7.79 and 7.85 against 7.71 and 7.77; chrF 27.4 and
    # 27.2 against 27.1 and 26.9), the only search that was (beam 8: 7.50 and 7.66; greedy: 6.62
    # and 7.08; alpha 1.5 ran on, 4.60 and 4.93): chosen (CHOSEN_DECODING), the test split of both
    # seeds scored in it too. Two levers on these settings, each on seeds 0 and 1, declared
    # before they ran: Eq. 3's whole curve 1.5 times as high (twice had lost at 1600 steps, before
    # the 40 averaged, which smooth a noisier walk), and label smoothing 0.3 (0.2 was ahead of
    # 0.1). A lever is chosen if it is ahead of the two runs above on both seeds in the chosen
    # decoding; if both are, the one with the higher mean.
    *on_demo_seeds(
        "smoothing-0.2-lr-x1.5",
        "learning rate",
        *("--set", "label_smoothing=0.2", "--set", "learning_rate_scale=1.5"),
        kept=40,
        decodings=(FORTY_AVERAGED, CHOSEN_DECODING),
    ),
    *on_demo_seeds(
        "smoothing-0.3",
        "regularization",
        *("--set", "label_smoothing=0.3"),
        kept=40,
        decodings=(FORTY_AVERAGED, CHOSEN_DECODING),
    ),
    # The rate 1.5 times as high is behind on both seeds in the chosen decoding (7.77 and 7.31
    # against 7.79 and 7.85, at 3557 and 3639 steps); label smoothing 0.3 is behind on seed 0
    # (6.85 at 3769 steps) and seed 1 (7.11 at 3759 steps): neither is chosen.
    # Where the curve goes with the chosen settings (issue 39's third point; the curve above ran
    # before label smoothing 0.2 and alpha 1.2, and on the slower machine): 60 minutes, every
    # checkpoint kept, scored as if it had ended at 14, 30 and 45 minutes too. Declared before it
    # ran: the test split is scored in the chosen decoding at every point; the wider windows (the
    # last 80 and 160 checkpoints, 2000 and 4000 steps) are scored on validation only, to say
    # whether a longer run wants a wider one.
    on_demo(
        "smoothing-0.2-60-minutes",
        "time budget",
        *("--set", "label_smoothing=0.2"),
        decodings=(CHOSEN_DECODING, *WIDER_WINDOWS),
        test=CHOSEN_DECODING,
        budget=60,
        kept=5000,
        curve=(14, 30, 45),
        curve_decodings=(CHOSEN_DECODING, *WIDER_WINDOWS),
    ),
    # With 40 averaged, validation fell from 7.56 at 14 minutes (3725 steps) to 7.35, 7.11 and
    # 6.55 at 30, 45 and 60 (test 7.71 to 6.34); 160 averaged led from 30 minutes on (7.91 there;
    # its test split, scored once by hand, 8.15). `make demo` stays at 14 minutes with 40.
    # The wider window for a 30-minute run on a second seed, declared before it ran: the README
    # keeps its advice of 160 averaged for `DEMO_MINUTES=30` only if 160 is ahead of 40 on
    # validation on this seed too, else withdraws it; its test split is scored once, with 160.
    on_demo(
        "smoothing-0.2-30-minutes-seed-1",
        "time budget",
        *("--set", "label_smoothing=0.2"),
        seed=1,
        decodings=(CHOSEN_DECODING, *WIDER_WINDOWS),
        test=WIDER_WINDOWS[-1],
        budget=30,
        kept=160,
    ),
    # 160 averaged ahead of 40 on this seed too (7.94 against 7.61 at 8154 steps), test 7.49: the
    # README's advice stands.
    # Two levers the low-resource study names (Araabi & Monz 2020) on the chosen settings, not yet
    # tried on them: two attention heads instead of four (64 dimensions each), and dropout 0.1 on
    # the attention weights. Declared before they ran: seed 0 of each first; a lever behind the
    # chosen run's seed 0 (7.79) in the chosen decoding is not chosen and its seed 1 is not run;
    # one ahead runs seed 1 and is chosen if ahead of 7.85 there too; if both are, the one with
    # the higher mean.
    on_demo(
        "smoothing-0.2-heads-2",
        "shape",
        *("--set", "label_smoothing=0.2", "--set", "num_heads=2"),
        kept=40,
        decodings=(CHOSEN_DECODING,),
    ),
    on_demo(
        "smoothing-0.2-attention-dropout-0.1",
        "regularization",
        *("--set", "label_smoothing=0.2", "--set", "attention_dropout=0.1"),
        kept=40,
        decodings=(CHOSEN_DECODING,),
    ),
    # Both behind on seed 0 (7.66 at 3579 steps and 7.65 at 3633, against 7.79): neither is
    # chosen, and their seed 1 was not run.
    # The sentence pairs alone, with residual dropout 0.1, on the chosen settings otherwise. The
    # phrase pairs were chosen (4.06 -> 6.18) when the sentences alone had no dropout and their
    # validation was flat from step 1200; `fast-dropout-0.1`, run at last on 2026-11-29 on the Zen
    # 4, scored 6.78 with the sentences alone (validation level from step 2400, at a training
    # accuracy of 0.54). Declared before it ran, as the levers above: seed 0 first, behind 7.79
    # -> not chosen and seed 1 not run; ahead -> seed 1, chosen if ahead of 7.85 there too.
    Run(
        "fast-relu-dropout-0.1-vocab-8k-batch-2000-smoothing-0.2-dropout-0.1",
        "data",
        (*FAST, *STAGE_3_CHOICES, *SMOOTHING_0_2, "--set", "dropout=0.1"),
        kept=40,
        decodings=(CHOSEN_DECODING,),
    ),
    # Behind on seed 0 (6.44 at 3435 steps, against 7.79): not chosen, and its seed 1 was not run.
    # The Ding parser 5 (2026-11-29, afternoon) removes <...> annotations (other spellings, a
    # separable verb's <>) and nested ones whole: 17 more training sentence pairs, one more test
    # pair, 1,471 phrase pairs cleaned; the validation split is unchanged. A correctness fix, kept
    # whatever this run scores: the chosen settings again on seed 0, to measure it against 7.79
    # (parser 4). Declared before it ran: more than 0.5 behind is looked into before `make demo`
    # trains on it. (The declaration gave 0.5 as "the three seeds' spread before label smoothing
    # 0.2, 0.38, rounded up"; 0.38 was stage 3's spread, those three seeds were 0.62 apart.)
    Run(
        f"{SMOOTHED_RUN}-ding-parser-5",
        "data",
        SMOOTHED_FLAGS,
        kept=40,
        decodings=(CHOSEN_DECODING,),
    ),
    # 7.01 at 3649 steps (147 GFLOP/s; the parser-4 run: 3850 steps, 161 GFLOP/s): 0.78 behind.
    # Looked into: every annotation the parser now removes was compared with parser 4's text on
    # the whole file (2,465 sub-entries differ, each by <...> or a nested annotation removed, none
    # by more). Then seed 1, declared before it ran, against parser 4's 7.85: the two seeds' mean
    # against 7.82 says what the fix costs or buys; the fix stays either way (a correction of
    # the data, not a setting), and the README quotes a fresh-clone demo on it.
    Run(
        f"{SMOOTHED_RUN}-ding-parser-5-seed-1",
        "data",
        SMOOTHED_FLAGS,
        seed=1,
        kept=40,
        decodings=(CHOSEN_DECODING,),
    ),
    # 7.56 at 3828 steps against 7.85: behind on both seeds (-0.78 and -0.29; mean 7.29 against
    # 7.82), chrF level (27.0 and 27.3 against 27.4 and 27.2). The fix stays, as declared.
    # A unigram vocabulary without sampling, on the chosen settings and parser 5: stage 3 ran
    # the unigram vocabulary only with sampling (two changes at once, 5.01 against 6.18), so the
    # vocabulary alone was never measured. Declared before it ran: seed 0 first, against parser 5's
    # seed 0 (7.01); behind -> not chosen and seed 1 not run; ahead -> seed 1, chosen if ahead of
    # 7.56 there too.
    Run(
        f"{SMOOTHED_RUN}-ding-parser-5-unigram",
        "vocabulary",
        (*SMOOTHED_FLAGS, "--subword-model", "unigram"),
        kept=40,
        decodings=(CHOSEN_DECODING,),
    ),
    # 7.83 at 3780 steps (chrF 28.0) against 7.01 (27.0): ahead, so its seed 1, by the rule above.
    Run(
        f"{SMOOTHED_RUN}-ding-parser-5-unigram-seed-1",
        "vocabulary",
        (*SMOOTHED_FLAGS, "--subword-model", "unigram"),
        seed=1,
        kept=40,
        decodings=(CHOSEN_DECODING,),
    ),
    # 7.11 at 3725 steps against 7.56 (chrF 27.3 against 27.3): behind on seed 1, so not chosen
    # (mean 7.47 against 7.29 on parser 5: one seed each way). `make demo` keeps BPE.
    # More real sentence pairs, the one thing the curve says the demo lacks: the other
    # translations Ding lists of its sentences (`--sentence-alternatives`, the Ding parser 6:
    # 2,945 training pairs beside the 18,755; train, validation, test and phrases identical to
    # parser 5's, so the parser-5 runs above are the reference). Declared before they ran: both
    # seeds run; chosen if ahead of the parser-5 runs on both (7.01 and 7.56, the chosen
    # decoding), else `make demo` is unchanged.
    *(
        Run(
            f"{SMOOTHED_RUN}-sentence-alternatives{'-seed-1' if seed else ''}",
            "data",
            (*SMOOTHED_FLAGS, "--sentence-alternatives"),
            seed=seed,
            kept=40,
            decodings=(CHOSEN_DECODING,),
        )
        for seed in (0, 1)
    ),
    # 7.22 at 3471 steps (chrF 26.7) against 7.01 (27.0), and 7.12 at 3793 (26.3) against 7.56
    # (27.3): ahead on seed 0, behind on seed 1, chrF behind on both. Not chosen; `make demo`
    # is unchanged. After them, parser 7 dropped 187 of parser 6's pairs (60 listed with a
    # held-out sentence, 127 split at a ` / ` inside one): not run again, the leak could only
    # have helped.
    # The averaging window on a faster step (2026-12-01): the Zen 4 of this day trains the chosen
    # settings at about 125 ms a step (about 223 on 2026-11-29), so the demo's 14 minutes reach
    # about 6700 steps, where the curve above had 160 averaged ahead of 40 (at 8000 steps). The
    # chosen settings on the Ding parser 7 (its training pairs without --sentence-alternatives
    # are parser 5's), both seeds, in the chosen search over the last 40, 80, 120, 160 and 240
    # checkpoints. Declared before they ran: a window is chosen if ahead of 40 on both seeds in
    # validation BLEU (if several, the one with the higher mean); the test split is then scored
    # once per seed, in the window chosen.
    *(
        Run(
            f"{SMOOTHED_RUN}-faster-step{'-seed-1' if seed else ''}",
            "decoding",
            SMOOTHED_FLAGS,
            seed=seed,
            kept=320,
            decodings=tuple((4, 1.2, averaged, 1) for averaged in (40, 80, 120, 160, 240)),
        )
        for seed in (0, 1)
    ),
    # Seed 0: 6813 steps (124 ms a step; matmul 376 GFLOP/s, about twice 2026-11-29's), validation
    # BLEU 7.50, 7.72, 7.78, 7.48 and 7.44 with 40, 80, 120, 160 and 240 averaged; seed 1: 7090
    # steps, 8.02, 7.99, 7.45, 7.89 and 7.83. No window is ahead of 40 on both seeds: 40 stays.
    # Against the parser-5 runs at about 3700 steps (7.01 and 7.56), the faster step bought +0.49
    # and +0.46 with 40 averaged.
    # The model's size on the faster step: at about 7000 steps the chosen model ends at a training
    # accuracy of 0.58 over a mixture of 555,620 pairs (2831 batches; two and a half passes): room
    # for a larger model, which the slower machine could not train enough steps of (the width 192
    # lost there, 5.94 against 6.77, at fewer steps). Declared before they ran: the width 192 (d_ff
    # 768, four heads of 48) and three layers each side instead of two, seed 0 of each first,
    # against the run above (7.50, 40 averaged); behind -> not chosen and its seed 1 not run; ahead
    # -> its seed 1, chosen if ahead of 8.02 there too; if both are, the one with the higher mean.
    *(
        Run(
            f"{WIDER_RUN}{'-seed-1' if seed else ''}",
            "shape",
            WIDER_FLAGS,
            seed=seed,
            kept=40,
            decodings=(CHOSEN_DECODING,),
            test=CHOSEN_DECODING,
        )
        for seed in (0, 1)
    ),
    # The width 192: 7.67 at 4947 steps on seed 0 (170 ms a step; chrF 28.6 against 27.8), ahead,
    # so its seed 1 ran (declared in 26a7994): 8.59 at 4835 steps (chrF 28.6 against 27.2). Ahead
    # on both seeds (mean 8.13 against 7.76): chosen, and `make demo` trains it. Its test split,
    # scored once on each seed (added after the choice, on the kept checkpoints): see QUALITY.md.
    Run(
        f"{SMOOTHED_RUN}-faster-step-layers-3",
        "depth",
        (*SMOOTHED_FLAGS, "--set", "num_layers=3"),
        kept=40,
        decodings=(CHOSEN_DECODING,),
    ),
    # 6.99 at 5678 steps (148 ms a step; chrF 26.0): behind 7.50, so not chosen and its seed 1
    # not run.
)


# The vector instructions that set a CPU's matmul speed, widest first: two CPUs of one model name
# (an AVX2 and a Zen 4 AMD EPYC) ran the demo's 14 minutes to 1747 and 3737 steps.
VECTOR_FLAGS = ("avx512_bf16", "avx512f", "avx2")


def machine():
    """The CPU model, its widest vector instructions (of VECTOR_FLAGS) and the cores this process
    may use."""
    model, flags = platform.processor() or platform.machine(), set()
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        fields = [line.split(":", 1) for line in cpuinfo.read_text().splitlines() if ":" in line]
        names = [value.strip() for key, value in fields if key.strip() == "model name"]
        model = names[0] if names else model
        flags = {flag for key, value in fields if key.strip() == "flags" for flag in value.split()}
    widest = next((flag.upper() for flag in VECTOR_FLAGS if flag in flags), None)
    return f"{model}{f' ({widest})' if widest else ''}, {len(os.sched_getaffinity(0))} cores"


def run_child(run, work_dir, minutes, score_only=False):
    """Trains `run` in this process for `minutes` with the training program's Trainer, scores
    its decodings and writes RUN_DIR/result.json; with `score_only`, adds the scores the
    finished run's result lacks."""
    from training import train
    from training.plan import TrainingPlan
    from training.trainer import Trainer

    run_dir = work_dir / run.name
    tokenizer = work_dir / "tokenizers" / f"{run.tokenizer_key()}.model"
    flags = [*run.training_flags(minutes), "--run-dir", str(run_dir)]
    if score_only:  # the tokenizer as the run was trained: the shared one it names, or its own
        given = RunDirectory(run_dir).read_settings()["vocabulary"].get("tokenizer")
    else:  # without one, the run trains its own and shares it (train_and_describe)
        given = tokenizer if tokenizer.is_file() else None
    if given:  # the tokenizer's model type is its own
        flags = [*without_flag(flags, "--subword-model"), "--tokenizer", str(given)]
    started = time.monotonic()
    trainer = Trainer(TrainingPlan.from_flags(train.build_parser().parse_args(flags)))
    path = run_dir / "result.json"

    def save():  # after training and after every score: a failure loses no finished work
        result["definition"] = run.definition(minutes)
        path.write_text(json.dumps(result, indent=2))

    with trainer.prepared():
        if score_only:
            result = json.loads(path.read_text())
            if trained_as(result["definition"]) != trained_as(run.definition(minutes)):
                raise ValueError(f"{path}: not trained as {run.name} is now; train it again")
        else:
            result = train_and_describe(run, trainer, tokenizer, minutes)
            save()
        add_scores(trainer, run, result, save)
    if not score_only:
        result["total_seconds"] = round(time.monotonic() - started, 1)
    save()


def train_and_describe(run, trainer, tokenizer, minutes):
    """Trains `run` (sharing its trained tokenizer at `tokenizer`) and returns its result record,
    scores to come."""
    from benchmarks import bench
    from training.checkpointing import current_step

    if not tokenizer.is_file():
        tokenizer.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(trainer.directory.tokenizer, tokenizer)
    # The machine's speed as the run starts: a run is bounded by time, so a slow hour costs
    # steps.
    matmul_gflops = bench.matmul_rate(repeats=10, sizes=(1024,)) / 1e9
    training_started = time.monotonic()
    steps = current_step(trainer.train())
    training_seconds = time.monotonic() - training_started
    return {
        "name": run.name,
        "lever": run.lever,
        "flags": list(run.flags),
        "seed": run.seed,
        "minutes": minutes,
        "steps": steps,
        "training_seconds": round(training_seconds, 1),
        "matmul_gflops": round(matmul_gflops, 1),
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "scores": [],
    }


def add_scores(trainer, run, result, save):
    """Scores the tasks `result` lacks (`Run.missing`) into it, calling `save` after each: the
    run's with the average of its last checkpoints, a curve point's with the last ones written
    by that minute of training. The run's budget ended it, and its last checkpoint was written
    then (at the step in progress): minute N is that checkpoint's file time less the budget's
    remaining minutes (the files must keep their times: copy a run with them)."""
    from keras_transformer_cli import checkpoints

    paths = checkpoints.list_checkpoints(trainer.directory.checkpoints)
    for minutes, split, decoding in run.missing(result):
        if minutes is None:
            result["scores"].append(score(trainer, split, decoding, paths))
            save()
            continue
        cut = paths[-1].stat().st_mtime - 60 * (result["minutes"] - minutes)
        written = [p for p in paths if p.stat().st_mtime <= cut]
        if not written:
            raise ValueError(f"{run.name}: no checkpoint was written in its first {minutes:g} min")
        prefixes = result.setdefault("prefixes", [])
        prefix = next((p for p in prefixes if p["minutes"] == minutes), None)
        if prefix is None:
            prefix = {"minutes": minutes, "steps": checkpoints.step_of(written[-1]), "scores": []}
            prefixes.append(prefix)
        prefix["scores"].append(score(trainer, split, decoding, written, f"-at-{minutes:g}min"))
        save()


def score(trainer, split, decoding, paths, label=""):
    """Translates `split` with `decoding` and the average of the last of the checkpoints at
    `paths`, and scores it; one score record."""
    import keras_transformer as kt
    from keras_transformer_cli.engines import tensor_engine
    from training import metrics

    directory = trainer.plan.run_dir
    pairs = trainer.dataset.pairs(split)
    beam, alpha, window, min_length = decoding_settings(decoding)
    window = len(paths[-window:])  # fewer when the run wrote fewer
    model = trainer.directory.averaged_model(paths[-window:])
    translator = kt.Translator(model, trainer.tokenizer, beam, alpha, min_length=min_length)
    print(
        f"{directory.name}{label}: {split} split, beam {beam}, alpha {alpha}, {window} "
        "checkpoint(s) averaged",
        file=sys.stderr,
    )
    engine = tensor_engine(translator.signatures(), f"beam {beam}")
    hypotheses = metrics.translate_all(engine, [s for s, _ in pairs], verbose=2)
    setting = f"beam{beam}-alpha{alpha}-avg{window}" + (f"-min{min_length}" if min_length else "")
    output = directory / f"translations.{split}.{setting}{label}.txt"
    result = metrics.score_report(hypotheses, [t for _, t in pairs], output)
    record = {"split": split, "beam": beam, "alpha": alpha, "averaged": window}
    asked = list(decoding_settings(decoding))  # `averaged` is fewer where fewer were written
    return {**record, "min_length": min_length, "decoding": asked, **result}


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


def trained_as(definition):
    """What of a run's definition its training depends on: the flags and the study's version."""
    return {k: definition.get(k) for k in ("training_flags", "version")}


def recorded_results(report):
    raw = report.with_suffix(".json")
    return json.loads(raw.read_text()) if raw.is_file() else []


def results(work_dir, minutes, recorded=()):
    return [result for run in STUDY if (result := result_of(run, work_dir, minutes, recorded))]


def decoding_settings(decoding):
    """(beam, alpha, checkpoints averaged, min_length) of a run's decoding; min_length 0 (eos
    allowed first) when a decoding does not say, as the runs scored before it existed."""
    return (*decoding, 0)[:4]


def decoding_key(score):
    return (score["beam"], score["alpha"], score["averaged"], score.get("min_length", 0))


TABLE_NOTES = (
    "val/test BP: BLEU's brevity penalty (1 = output not shorter than the references); val len: "
    "output length / reference length (in 13a tokens; above 1 the output runs on). avg: the last "
    "N checkpoints (25 steps apart) averaged. min len: no eos before this many tokens (0: an "
    "empty translation is possible). min: the training budget in minutes. s/step: the "
    "training's wall-clock seconds (model building and data preparation included) over its "
    "steps. GFLOP/s: the machine's float32 matmul rate (1024², TensorFlow) measured just before "
    "the run trained: how fast the machine was during it."
)


def table(found):
    """One row per run and decoding: settings, steps reached, validation and test scores."""
    header = (
        "| run | lever | settings (beyond the demo's) | seed | min | steps | s/step | GFLOP/s | "
        "beam | alpha | avg | min len | "
        "val BLEU | val chrF | val BP | val len | test BLEU | test chrF | test BP | date |"
    )
    rows = [header, "|" + " --- |" * header.count(" | ") + " --- |"]
    for result in (r for whole in found for r in (whole, *curve_points(whole))):
        test = {decoding_key(s): s for s in result["scores"] if s["split"] == "test"}
        for score in (s for s in result["scores"] if s["split"] == "validation"):
            rows.append("| " + " | ".join(table_cells(result, score, test)) + " |")
    machines = sorted({r["machine"] for r in found})
    signatures = sorted(
        {s[f"{m}_signature"] for r in found for s in r["scores"] for m in ("bleu", "chrf")}
    )
    return "\n".join(
        [
            "Written by `python -m benchmarks.quality` "
            f"({len(found)} runs; machine: {'; '.join(machines) or '-'}).",
            "",
            *rows,
            "",
            TABLE_NOTES,
            "sacrebleu signatures: " + "; ".join(f"`{s}`" for s in signatures),
        ]
    )


def curve_points(result):
    """A run's curve points (`Run.curve`) as results of their own: the run cut at that minute."""
    return [
        {
            **result,
            "name": f"{result['name']} (its first {point['minutes']:g} min)",
            "minutes": point["minutes"],
            "steps": point["steps"],
            "training_seconds": 60 * point["minutes"],
            "scores": point["scores"],
        }
        for point in result.get("prefixes", ())
    ]


def table_cells(result, score, test):
    """A row's cells: the run, its validation `score` and the test score of its decoding."""
    key = decoding_key(score)
    tested = test.get(key)
    return [
        result["name"],
        result["lever"],
        " ".join(result["flags"]) or "(the demo's)",
        str(result["seed"]),
        f"{result['minutes']:g}",
        str(result["steps"]),
        speed(result, "training_seconds", result["steps"]),
        speed(result, "matmul_gflops"),
        str(key[0]),
        f"{key[1]:g}",
        str(key[2]),
        str(key[3]),
        f"{score['bleu']:.2f}",
        f"{score['chrf']:.1f}",
        f"{score['brevity_penalty']:.3f}",
        f"{score['length_ratio']:.2f}",
        f"{tested['bleu']:.2f}" if tested else "-",
        f"{tested['chrf']:.1f}" if tested else "-",
        f"{tested['brevity_penalty']:.3f}" if tested else "-",
        result["date"],
    ]


def speed(result, field, steps=None):
    """A run's `field` (over `steps`), or "-" for a result recorded before it was measured."""
    if field not in result:
        return "-"
    return f"{result[field] / steps:.2f}" if steps else f"{result[field]:.0f}"


def write_report(found, report):
    """Rewrites the table between the markers of `report` (.md) and the raw results beside it
    (.json). Results recorded there before and not among `found` (another budget, a run since
    trained otherwise) are kept, after the others."""

    def key(result):
        return result["name"], json.dumps(trained_as(result.get("definition", {})))

    now = {key(r) for r in found}
    found = found + [r for r in recorded_results(report) if key(r) not in now]
    text = (
        report.read_text()
        if report.is_file()
        else f"# Translation quality\n\n{TABLE_START}\n{TABLE_END}\n"
    )
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f"{report} lacks the table markers {TABLE_START!r} and {TABLE_END!r}")
    before, rest = text.split(TABLE_START, 1)
    after = rest.split(TABLE_END, 1)[1]
    report.write_text(f"{before}{TABLE_START}\n{table(found)}\n{TABLE_END}{after}")
    report.with_suffix(".json").write_text(json.dumps(found, indent=2) + "\n")


def build_parser():
    parser = flags.parser(__doc__, "benchmarks.quality")
    flags.add_table(
        parser,
        ("--work-dir", pathlib.Path, pathlib.Path("runs/quality"), "where the runs are kept"),
        (
            "--minutes",
            flags.positive,
            SCREEN_MINUTES,
            f"training budget of a screening run, in minutes (default: {SCREEN_MINUTES}); the "
            f"runs that confirm the chosen settings train for the demo's {FULL_MINUTES}",
        ),
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NAME",
        help="run only these runs (names, or levers such as 'data')",
    )
    flags.add_output(
        parser, "the report (the raw results go beside it as .json)", default=REPORT, dest="report"
    )
    parser.add_argument(
        "--list", action="store_true", help="list the study's runs and whether each is done"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # one run, in a process
    parser.add_argument("--score-only", action="store_true", help=argparse.SUPPRESS)
    return parser


@console.program
def main(argv=None):
    parser = build_parser()
    args = flags.parse(parser, argv)
    by_name = {run.name: run for run in STUDY}
    if args.child:
        run = by_name[args.child]
        return run_child(run, args.work_dir, run.minutes(args.minutes), args.score_only)
    chosen = [
        run for run in STUDY if not args.only or run.name in args.only or run.lever in args.only
    ]
    unknown = set(args.only or ()) - {r.name for r in STUDY} - {r.lever for r in STUDY}
    if unknown:
        parser.error(f"no run or lever named {', '.join(sorted(unknown))}; see --list")
    recorded = recorded_results(args.report)
    found = {run.name: result_of(run, args.work_dir, args.minutes, recorded) for run in STUDY}
    if args.list:
        for run in STUDY:
            result = found[run.name]
            state = "todo" if result is None else "score" if run.missing(result) else "done"
            print(
                f"{state:<5} {run.name:<28} {run.lever:<15} {run.minutes(args.minutes):g} min  "
                f"{' '.join(run.flags)}"
            )
        return None
    failed = run_study(args, chosen, found, recorded)
    if failed:
        console.fail(f"{len(failed)} run(s) failed: {', '.join(failed)}")
    return None


def run_study(args, chosen, found, recorded):
    """Trains the chosen runs not yet done, then scores the finished runs' decodings added
    since; rewrites the report after each. Returns the names of the runs that failed."""
    todo = [run for run in chosen if found[run.name] is None]
    unscored = [run for run in chosen if found[run.name] and run.missing(found[run.name])]
    print(
        f"{len(chosen) - len(todo)} of {len(chosen)} runs done; {len(todo)} to go, "
        f"about {sum(r.minutes(args.minutes) + 3 for r in todo):.0f} minutes; "
        f"{len(unscored)} to score again; table: {args.report}",
        flush=True,
    )
    failed = []
    for number, run in enumerate(todo, start=1):
        if train_run(args, run, f"[{number}/{len(todo)}]"):
            write_report(results(args.work_dir, args.minutes, recorded), args.report)
        else:
            failed.append(run.name)
    for run in unscored:
        tasks = run.missing(found[run.name])
        print(f"{run.name}: {len(tasks)} decoding(s) to score", flush=True)
        if not RunDirectory(args.work_dir / run.name).checkpoints.is_dir():
            print(f"    failed: its checkpoints are not in {args.work_dir / run.name}", flush=True)
            failed.append(run.name)
        elif not run_in_child(run, args, "a", "--score-only"):
            failed.append(run.name)
    write_report(results(args.work_dir, args.minutes, recorded), args.report)
    print(f"table written to {args.report} and {args.report.with_suffix('.json')}")
    return failed


def train_run(args, run, counter):
    """Trains and scores `run` in a fresh process, from nothing (a run cut short is started
    again for the same budget: the study made its directory); whether it succeeded."""
    run_dir = args.work_dir / run.name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    print(
        f"{counter} {run.name}: {' '.join(run.flags) or 'the demo settings'}, "
        f"{run.minutes(args.minutes):g} minutes (log: {run_dir / 'log.txt'})",
        flush=True,
    )
    if not run_in_child(run, args, "w"):
        return False
    result = json.loads((run_dir / "result.json").read_text())
    best = max((s for s in result["scores"] if s["split"] == "validation"), key=lambda s: s["bleu"])
    print(
        f"    {result['steps']} steps; best validation BLEU {best['bleu']:.2f}, chrF "
        f"{best['chrf']:.1f} (beam {best['beam']}, alpha {best['alpha']:g}, "
        f"{best['averaged']} averaged)",
        flush=True,
    )
    return True


def run_in_child(run, args, log_mode, *more):
    """Runs `run` in a fresh process logging to RUN_DIR/log.txt; whether it succeeded."""
    run_dir = args.work_dir / run.name
    with open(run_dir / "log.txt", log_mode) as log:
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.quality",
                "--child",
                run.name,
                "--work-dir",
                str(args.work_dir),
                "--minutes",
                str(args.minutes),
                *more,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if completed.returncode != 0:
        print(
            f"    failed (exit code {completed.returncode}); see {run_dir / 'log.txt'}", flush=True
        )
    return completed.returncode == 0


if __name__ == "__main__":
    main()
