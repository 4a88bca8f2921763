"""Running the quality study's runs (benchmarks/quality.py declares them): each in a fresh
process that trains it with the training program, scores its decodings and writes
RUN_DIR/result.json; the report is rewritten after each."""

import datetime
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time

from benchmarks import quality_report
from benchmarks.quality_runs import decoding_settings, results, trained_as, without_flag
from keras_transformer_cli.run_dir import RunDirectory


def run_study(study, args, chosen, found, recorded):
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
            quality_report.write_report(
                results(study, args.work_dir, args.minutes, recorded), args.report
            )
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
    quality_report.write_report(results(study, args.work_dir, args.minutes, recorded), args.report)
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
    command = [sys.executable, "-m", "benchmarks.quality", "--child", run.name]
    command += ["--work-dir", str(args.work_dir), "--minutes", str(args.minutes), *more]
    with open(run_dir / "log.txt", log_mode) as log:
        completed = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    if completed.returncode != 0:
        print(
            f"    failed (exit code {completed.returncode}); see {run_dir / 'log.txt'}", flush=True
        )
    return completed.returncode == 0


# The vector instructions that set a CPU's matmul speed, widest first: they tell apart two CPUs of
# one model name.
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
    """Trains `run` in this process for `minutes` with the training program (its context,
    `training.context.opened`, and its fit, without the run's end), scores its decodings and
    writes RUN_DIR/result.json; with `score_only`, adds the scores the finished run's result
    lacks."""
    from training import train
    from training.context import opened
    from training.plan import TrainingPlan

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
    plan = TrainingPlan.from_flags(train.build_parser().parse_args(flags))
    path = run_dir / "result.json"

    def save():  # after training and after every score: a failure loses no finished work
        result["definition"] = run.definition(minutes)
        path.write_text(json.dumps(result, indent=2))

    with opened(plan) as context:
        if score_only:
            result = json.loads(path.read_text())
            if trained_as(result["definition"]) != trained_as(run.definition(minutes)):
                raise ValueError(f"{path}: not trained as {run.name} is now; train it again")
        else:
            result = train_and_describe(run, context, tokenizer, minutes)
            save()
        add_scores(context, run, result, save)
    if not score_only:
        result["total_seconds"] = round(time.monotonic() - started, 1)
    save()


def train_and_describe(run, context, tokenizer, minutes):
    """Trains `run` (its RunContext: `training.context`), sharing its trained tokenizer at
    `tokenizer`, and returns its result record, scores to come."""
    from benchmarks import bench
    from keras_transformer_cli.checkpoints import current_step
    from training.fit import fit

    if not tokenizer.is_file():
        tokenizer.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(context.directory.tokenizer, tokenizer)
    # The machine's speed as the run starts: a run is bounded by time, so a slower machine
    # reaches fewer steps.
    matmul_gflops = bench.matmul_rate(repeats=10, sizes=(1024,)) / 1e9
    training_started = time.monotonic()
    steps = current_step(fit(context))
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


def add_scores(context, run, result, save):
    """Scores the tasks `result` lacks (`Run.missing`) into it, calling `save` after each: the
    run's with the average of its last checkpoints, a curve point's with the last ones written
    by that minute of training. The run's budget ended it, and its last checkpoint was written
    then (at the step in progress): minute N is that checkpoint's file time less the budget's
    remaining minutes (the files must keep their times: copy a run with them)."""
    from keras_transformer_cli import checkpoints

    paths = checkpoints.list_checkpoints(context.directory.checkpoints)
    for minutes, split, decoding in run.missing(result):
        if minutes is None:
            result["scores"].append(score(context, split, decoding, paths))
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
        prefix["scores"].append(score(context, split, decoding, written, f"-at-{minutes:g}min"))
        save()


def score(context, split, decoding, paths, label=""):
    """Translates `split` of the run of `context` with `decoding` and the average of the last of
    the checkpoints at `paths`, and scores it; one score record."""
    import keras_transformer as kt
    from keras_transformer.inference import signature_translator
    from keras_transformer_cli import checkpoints
    from training import metrics

    directory = context.plan.run_dir
    pairs = context.dataset.pairs(split)
    beam, alpha, window, min_length = decoding_settings(decoding)
    window = len(paths[-window:])  # fewer when the run wrote fewer
    model = checkpoints.averaged_model(context.directory, paths[-window:])
    translator = kt.Translator(model, context.tokenizer, beam, alpha, min_length=min_length)
    print(
        f"{directory.name}{label}: {split} split, beam {beam}, alpha {alpha}, {window} "
        "checkpoint(s) averaged",
        file=sys.stderr,
    )
    translate = signature_translator(translator, "model").translate
    hypotheses = metrics.translate_all(translate, [s for s, _ in pairs], verbose=2)
    setting = f"beam{beam}-alpha{alpha}-avg{window}" + (f"-min{min_length}" if min_length else "")
    output = directory / f"translations.{split}.{setting}{label}.txt"
    result = metrics.score_report(hypotheses, [t for _, t in pairs], output)
    record = {"split": split, "beam": beam, "alpha": alpha, "averaged": window}
    asked = list(decoding_settings(decoding))  # `averaged` is fewer where fewer were written
    return {**record, "min_length": min_length, "decoding": asked, **result}
