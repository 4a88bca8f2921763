"""The quality study's report: benchmarks/QUALITY.md between its markers, written from
benchmarks/QUALITY.json (every run's result, the measurements outside the runs, the lever table's
rows and notes) and the study's declarations in benchmarks/quality.py."""

import dataclasses
import json
import textwrap

from benchmarks import demo_settings, quality, quality_runs
from benchmarks.quality_runs import decoding_key, decoding_settings, trained_as

TABLE_START, TABLE_END = (
    "<!-- quality table: written by benchmarks/quality.py -->",
    "<!-- end of the quality table -->",
)


@dataclasses.dataclass(frozen=True)
class Trial:
    """One row of the lever table: `runs` (one a seed) scored on validation in `decoding` (None:
    each run's best decoding) against `base` (the same seeds of the settings the row changes) in
    `base_decoding` (None: `decoding`), and the study's `decision`. A name is a result's
    (`record_name`), NAME@MINUTES for a curve's point, or a measurement's in QUALITY.json."""

    change: str
    runs: tuple
    decision: str
    base: tuple = ()
    decoding: tuple | None = None
    base_decoding: tuple | None = None


@dataclasses.dataclass(frozen=True)
class Section:
    """Rows of the lever table, with their base and machine in `text`."""

    title: str
    text: str
    trials: tuple


def lever_sections(data):
    """The lever table's sections, from QUALITY.json's `levers`: each row a Trial. Every run of
    QUALITY.json belongs to one row (the first that names it among its runs, else among its
    bases); the runs no row names get rows of their own (`with_unplaced`)."""

    def decoding(value):
        return None if value is None else tuple(value)

    return tuple(
        Section(
            section["title"],
            section["text"],
            tuple(
                Trial(
                    row["change"],
                    tuple(row["runs"]),
                    row["decision"],
                    tuple(row["base"]),
                    decoding(row["decoding"]),
                    decoding(row["base_decoding"]),
                )
                for row in section["rows"]
            ),
        )
        for section in data.get("levers", {}).get("sections", ())
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


def record_name(result):
    """A result's name in the report and its lever table; a result of an earlier version of the
    study says so."""
    version = result.get("definition", {}).get("version") or 1
    return result["name"] + (
        "" if version == quality_runs.STUDY_VERSION else f" (study version {version})"
    )


def best(scores, split="validation"):
    """The score of `split` with the highest BLEU, or None."""
    return max((s for s in scores if s["split"] == split), key=lambda s: s["bleu"], default=None)


def asked(score):
    """The decoding settings `score` was asked for (fewer may have been averaged, where fewer
    checkpoints were written); a score recorded before it said so, those it was scored with."""
    return tuple(score["decoding"]) if "decoding" in score else decoding_key(score)


def decoding_text(decoding):
    """beam/alpha/checkpoints averaged of decoding settings, * where eos could come first; None:
    each run's best."""
    if decoding is None:
        return "best"
    beam, alpha, averaged, min_length = decoding_settings(decoding)
    return f"{beam}/{alpha:g}/{averaged}" + ("" if min_length else "*")


def scored_in(entry, decoding, split="validation"):
    """The score of `entry` (a result, curve point or measurement) on `split` in `decoding`
    (None: its best), or None."""
    if entry is None:
        return None
    if decoding is None:
        return best(entry["scores"], split)
    wanted = decoding_settings(decoding)
    return next((s for s in entry["scores"] if s["split"] == split and asked(s) == wanted), None)


def entries(data):
    """{name: result or measurement} of QUALITY.json's `data`, the names the lever table uses."""
    found = {m["name"]: m for m in data.get("measurements", ()) if "scores" in m}
    return {**found, **{record_name(r): r for r in data["runs"]}}


def entry(name, named):
    """The result, measurement or curve point (NAME@MINUTES) called `name`, or None."""
    whole, _, minutes = name.partition("@")
    found = named.get(whole)
    if found is None or not minutes:
        return found
    point = next((p for p in found.get("prefixes", ()) if p["minutes"] == float(minutes)), None)
    return point and {"seed": found["seed"], "steps": point["steps"], "scores": point["scores"]}


def homes(sections, results):
    """{result name: (section, row) index of its row}: the first row that names it among its
    runs, else among its bases."""
    names = {record_name(r) for r in results}
    home = {}
    for field in ("runs", "base"):
        for s, section in enumerate(sections):
            for t, trial in enumerate(section.trials):
                for name in getattr(trial, field):
                    if name in names:
                        home.setdefault(name, (s, t))
    return home


def with_unplaced(sections, results):
    """`sections`, and one more for the results no row names: a row for each lever."""
    home = homes(sections, results)
    unplaced = [r for r in results if record_name(r) not in home]
    if not unplaced:
        return sections
    levers = dict.fromkeys(r["lever"] for r in unplaced)
    rows = tuple(
        Trial(lever, tuple(record_name(r) for r in unplaced if r["lever"] == lever), "-", (), None)
        for lever in levers
    )
    return (*sections, Section("Runs no row above names", "Each run's best decoding.", rows))


def bleu_cells(names, named, decoding):
    """The validation BLEU of each of `names` in `decoding` ("-" where it was not scored), as a
    cell, and the values."""
    found = [scored_in(entry(name, named), decoding) for name in names]
    values = [s["bleu"] for s in found if s]
    return " ".join(f"{s['bleu']:.2f}" if s else "-" for s in found), values


def trial_row(trial, named, counted):
    """A lever table row's cells."""
    runs = [entry(name, named) for name in trial.runs]
    texts, values = bleu_cells(trial.runs, named, trial.decoding)
    seeds_run = {r["seed"] for r in runs if r}
    base = [n for n in trial.base if (e := entry(n, named)) and e["seed"] in seeds_run]
    base_texts, _ = bleu_cells(base or trial.base, named, trial.base_decoding or trial.decoding)
    distinct = len(seeds_run) == len(runs) == len(values) > 1
    steps = [r["steps"] for r in runs if r]
    return [
        trial.change,
        str(counted),
        "-"
        if not steps
        else f"{sum(steps) / len(steps):.0f}"
        if len(seeds_run) == len(runs)
        else str(max(steps)),  # points of one run: where it ended
        decoding_text(trial.decoding),
        texts,
        f"{max(values) - min(values):.2f}" if distinct else "-",
        base_texts or "-",
        trial.decision,
    ]


LEVER_NOTES = (
    "One row per lever. `runs`: the study's runs the row counts (each run of QUALITY.json in one "
    "row; 0: runs counted in another row, or a probe outside the study); `steps`: their mean (a "
    "run's points: where it ended); `decoding`: beam/alpha/checkpoints averaged (25 steps apart; "
    "best: each run's best); validation BLEU (799 sentences), seeds 0 1 2 (or a run's points); "
    "`spread`: highest seed less lowest; `base`: the same seeds of the settings changed, in the "
    "row's decoding unless the change names another. A lever is chosen if ahead on both seeds."
)
LEVER_HEADER = (
    "| change | runs | steps | decoding | validation BLEU | spread | base | decision |",
    "| --- | ---: | ---: | --- | --- | ---: | --- | --- |",
)


def levers_section(data):
    sections = with_unplaced(lever_sections(data), data["runs"])
    home = homes(sections, data["runs"])
    counts = {}
    for place in home.values():
        counts[place] = counts.get(place, 0) + 1
    named = entries(data)
    lines = ["## What each lever gave", "", *wrapped(LEVER_NOTES)]
    for s, section in enumerate(sections):
        lines += ["", f"### {section.title}", "", *wrapped(section.text), "", *LEVER_HEADER]
        lines += [
            "| " + " | ".join(trial_row(trial, named, counts.get((s, t), 0))) + " |"
            for t, trial in enumerate(section.trials)
        ]
    return lines


def parsed_flags(flags):
    """{(option, --set key): value} of `flags`, the last value of each (True for a switch), in
    the order the options first appear: what argparse and --set make of them."""
    found, i = {}, 0
    while i < len(flags):
        value = True if i + 1 == len(flags) or flags[i + 1].startswith("--") else flags[i + 1]
        key = (flags[i], value.partition("=")[0] if flags[i] == "--set" else None)
        found[key] = value
        i += 1 if value is True else 2
    return found


def unparsed(options):
    """Flags again from `parsed_flags`'s options."""
    return [
        word for (flag, _), value in options.items() for word in (flag, value) if word is not True
    ]


def demo_command():
    """What `make demo` runs to train: demo.flags, for the demo's budget."""
    return [
        *("python", "-m", "training.train", *demo_settings.demo_flags()),
        *("--max-minutes", f"{quality_runs.FULL_MINUTES:g}", "--run-dir", "runs/demo"),
    ]


def wrapped(text, width=100):
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)


def command_block(words, width=100):
    lines, line = [], ""
    for word in words:
        if line and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return ["```sh", *lines, line, "```"]


def chosen_runs(runs):
    """The chosen settings' runs at the demo's budget, by seed."""
    found = [
        r
        for r in runs
        if tuple(r["flags"]) == quality.CHOSEN_FLAGS and r["minutes"] == quality_runs.FULL_MINUTES
    ]
    return sorted(found, key=lambda r: r["seed"])


def short(name, prefix):
    """`name` with `prefix` written `...`."""
    return "..." + name[len(prefix) :] if name.startswith(prefix) else name


def chosen_section(data):
    runs = chosen_runs(data["runs"])
    beam, alpha, averaged, min_length = decoding_settings(quality.CHOSEN_DECODING)
    names = ", ".join(f"`{short(record_name(r), quality.SMOOTHED_RUN)}`" for r in runs)
    return [
        "## The chosen settings",
        "",
        *wrapped(
            "What `make demo` trains and decodes with (demo.flags, which the Makefile reads; "
            "tests/test_quality.py holds them to this study's choice), with the study's runs of "
            + (
                f"them, seeds {', '.join(str(r['seed']) for r in runs)}: {names}"
                if runs
                else f"them to come: `{quality.CHOSEN_RUN}`"
            )
            + f" (`...` is `{quality.SMOOTHED_RUN}`)."
        ),
        "",
        *command_block(demo_command()),
        "",
        *wrapped(
            f"Decoding: beam {beam}, alpha {alpha:g}, the average of the last {averaged} "
            f"checkpoints ({quality_runs.CHECKPOINT_EVERY} steps apart)"
            + (f", at least {min_length} token(s) before eos." if min_length else ".")
        ),
    ]


def tested_section(data):
    runs = [r for r in chosen_runs(data["runs"]) if scored_in(r, quality.CHOSEN_DECODING, "test")]
    lines = ["## The test split (the chosen settings, scored once)", ""]
    if not runs:
        return [*lines, "Not scored yet."]
    lines += [
        "| seed | date | machine | steps | validation BLEU | chrF | test BLEU | chrF | BP |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    tests, sentences = [], scored_in(runs[0], quality.CHOSEN_DECODING, "test").get("sentences")
    for r in runs:
        val, test = (
            scored_in(r, quality.CHOSEN_DECODING),
            scored_in(r, quality.CHOSEN_DECODING, "test"),
        )
        tests.append(test["bleu"])
        lines.append(
            f"| {r['seed']} | {r['date']} | {r['machine']} | {r['steps']} | "
            + (f"{val['bleu']:.2f} | {val['chrf']:.1f}" if val else "- | -")
            + f" | {test['bleu']:.2f} | {test['chrf']:.1f} | {test['brevity_penalty']:.3f} |"
        )
    mean, half = (max(tests) + min(tests)) / 2, (max(tests) - min(tests)) / 2
    lines += [
        "",
        *wrapped(
            f"Test BLEU {mean:.2f} +/- {half:.2f} (half the range) over {len(tests)} seeds, "
            f"{sentences or 'the'} sentences, in the chosen decoding. Each earlier choice's test "
            'scores, in the decoding chosen then, are in QUALITY.json (`"split": "test"`).'
        ),
    ]
    return lines


def curve_section(data):
    named = entries(data)
    runs = [named[name] for name in quality.CURVE_RUNS if name in named]
    lines = ["## The learning curve", ""]
    if not runs:
        return [*lines, "Not run yet."]
    theirs = parsed_flags(runs[0]["flags"])
    differ = [
        key for key, value in parsed_flags(quality.CHOSEN_FLAGS).items() if theirs.get(key) != value
    ]
    lines += wrapped(
        f"`{quality.CURVE_RUNS[0]}` for {runs[0]['minutes']:g} minutes"
        + (f", `{'`, `'.join(quality.CURVE_RUNS[1:])}`" if len(runs) > 1 else "")
        + ": every checkpoint kept, scored as if the budget had ended at the minutes below (the "
        "weights at a step do not depend on the budget). "
        + (
            "The chosen settings add `"
            + " ".join(unparsed({key: parsed_flags(quality.CHOSEN_FLAGS)[key] for key in differ}))
            + "` to its flags; "
            if differ
            else ""
        )
        + data.get("curve_note", "")
    )
    columns = [decoding_text(d) for d in quality.CURVE_DECODINGS]
    lines += [
        "",
        f"Validation BLEU in {', '.join(columns)}, and the test split where it was scored:",
        "",
        f"| run, seed | minutes | steps | {' | '.join(columns)} | test BLEU (decoding) |",
        "| --- | ---: | ---: |" + " ---: |" * len(columns) + " --- |",
    ]
    for r in runs:
        points = [
            (p["minutes"], entry(f"{record_name(r)}@{p['minutes']:g}", named))
            for p in sorted(r.get("prefixes", ()), key=lambda p: p["minutes"])
        ]
        for minutes, point in [*points, (r["minutes"], r)]:
            at = f"{record_name(r)}@{minutes:g}" if point is not r else record_name(r)
            tests = [s for s in point["scores"] if s["split"] == "test"] + [
                s for m in data.get("measurements", ()) if m.get("point") == at for s in m["scores"]
            ]
            values = [scored_in(point, d) for d in quality.CURVE_DECODINGS]
            lines.append(
                f"| {'the curve' if r is runs[0] else 'another'}, {r['seed']} | {minutes:g} | "
                f"{point['steps']} | "
                + " | ".join(f"{v['bleu']:.2f}" if v else "-" for v in values)
                + " | "
                + ("; ".join(f"{s['bleu']:.2f} ({decoding_text(asked(s))})" for s in tests) or "-")
                + " |"
            )
    return lines


def demos_section(data):
    demos = data.get("fresh_clone_demos", ())
    lines = ["## `make demo` from a fresh clone", ""]
    if not demos:
        return [*lines, "None recorded."]
    averaged = decoding_settings(quality.CHOSEN_DECODING)[2]
    like = [d for d in demos if d["averaged"] == averaged]
    scores = [d["test_bleu"] for d in like]
    lines += wrapped(
        f"The demo of each commit, on 2 cores, with the last {averaged} checkpoints averaged as "
        f"now ({len(demos) - len(like)} earlier demos, averaging fewer, are in QUALITY.json): test "
        + (f"BLEU {min(scores):.2f} to {max(scores):.2f}. " if scores else "BLEU: none yet. ")
        + "`right`: of the five sentences `make demo` translates."
    )
    lines += [
        "",
        "| date | commit | machine | settings | steps | test BLEU | chrF | right |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for d in like:
        right = "-" if d["sentences_right"] is None else d["sentences_right"]
        lines.append(
            f"| {d['date']} | {d['commit'] or '-'} | {d['machine']} | {d['settings']} | "
            f"{d['steps']} | {d['test_bleu']:.2f} | {d['test_chrf']:.1f} | {right} |"
        )
    return lines


def measurements_section(data):
    found = data.get("measurements", ())
    tables = [m for m in found if "table" in m]
    lines = ["## Measured outside the study's runs", ""]
    lines += wrapped(
        "QUALITY.json's `measurements`, each with its date, machine, command and what it "
        f"measured: {len(found) - len(tables)} in the tables above (probes, a test split scored "
        "by hand), and these:"
    )
    for m in tables:
        header = m["table"]["columns"]
        lines += [
            "",
            *wrapped(f"{m['name']}, {m['date']}, {m['machine']}: {m['what']}."),
            "",
            "| " + " | ".join(header) + " |",
            "|" + " --- |" * len(header),
            *("| " + " | ".join(map(str, row)) + " |" for row in m["table"]["rows"]),
        ]
    return lines


def sources_section(data):
    runs = data["runs"]
    signatures = sorted(
        {s[f"{m}_signature"] for r in runs for s in r["scores"] for m in ("bleu", "chrf")}
    )
    return [
        "## Sources",
        "",
        *wrapped(
            f"Written by `python -m benchmarks.quality` from QUALITY.json: {len(runs)} runs, each "
            "with its date, machine, training flags, steps and every score (and its curve's "
            "points). Machines: " + "; ".join(sorted({r["machine"] for r in runs})) + "."
        ),
        "",
        *wrapped("sacrebleu signatures: " + "; ".join(f"`{s}`" for s in signatures) + "."),
    ]


def report_body(data):
    """The report between its markers, from QUALITY.json's `data`."""
    parts = (
        chosen_section,
        levers_section,
        curve_section,
        tested_section,
        demos_section,
        measurements_section,
        sources_section,
    )
    return "\n\n".join("\n".join(part(data)) for part in parts)


def recorded(report):
    """QUALITY.json beside `report`: {"runs": the study's results, and the records outside its
    runs} (a list: the runs alone, as the file was written before it held more)."""
    raw = report.with_suffix(".json")
    if not raw.is_file():
        return {"runs": []}
    data = json.loads(raw.read_text())
    return {"runs": data} if isinstance(data, list) else data


def recorded_results(report):
    return recorded(report)["runs"]


def write_report(found, report):
    """Rewrites the report between the markers of `report` (.md) from the results `found` and
    the raw results beside it (.json), and those raw results. Results recorded there before and
    not among `found` (another budget, a run since trained otherwise) are kept, after the others;
    so are the records outside the study's runs."""

    def key(result):
        return result["name"], json.dumps(trained_as(result.get("definition", {})))

    data = recorded(report)
    now = {key(r) for r in found}
    data = {**data, "runs": found + [r for r in data["runs"] if key(r) not in now]}
    text = (
        report.read_text()
        if report.is_file()
        else f"# Translation quality\n\n{TABLE_START}\n{TABLE_END}\n"
    )
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f"{report} lacks the table markers {TABLE_START!r} and {TABLE_END!r}")
    before, rest = text.split(TABLE_START, 1)
    after = rest.split(TABLE_END, 1)[1]
    report.write_text(f"{before}{TABLE_START}\n{report_body(data)}\n{TABLE_END}{after}")
    report.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
