"""Training speed on an accelerator with Keras, KerasHub, JAX and numpy only: what a GPU machine
without TensorFlow can run. Writes benchmarks/GPU.md and GPU.json.

    make gpu-bundle         # on a CPU machine with TensorFlow: build/gpu-bundle (data, wheels)
    python -m benchmarks.gpu --data build/gpu-bundle/ding          # on the GPU machine
    python -m benchmarks.gpu --quick --data DIR --output-dir DIR   # tiny sizes on a CPU (tests)

Each figure is measured in a fresh process (with --quick, the models in one), the things
compared in turn:
- the bf16 matmul rate (8192^3 on a GPU), the ceiling the models are put against;
- the base and big presets (Table 3) at the paper's batch of about 25,000 target tokens (§5.1),
  ours and the KerasHub-layers peer: target tokens/s, model FLOP/s and their share of the
  matmul rate, peak device memory, the first step (compilation);
- the host's share of a small model's step (`host`): the numpy loader, Keras's dispatch, a
  host sync per step, compilations per bucket shape, and --steps-per-execution;
- the demo's model trained from binarized data through `python -m training.train` for a fixed
  time (`demo`): steps/s after its first epoch, the validation loss, the model.keras it wrote.
"""

import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

from benchmarks import demo_settings
from keras_transformer_cli import console, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
PARTS = ("matmul", "models", "host", "loss", "demo")
# Ours, ours with Eq. 1 written out (the fused attention's A/B: base only) and the peer.
MODELS = ("ours", "ours-explicit", "kerashub")
PEERS = ("ours", "kerashub")
TOKENS = 25000  # §5.1: about 25000 target tokens per batch
LENGTH = 64  # tokens a side of the random pairs
# What a GPU affords beside the demo's model and search (`gpu_demo_flags`): 12000 tokens a batch
# and dropout 0.1 (the CPU's 14 minutes pass over the data a few times; a GPU's minutes, many
# times), checkpoints by the clock (their steps are not known ahead), the last 5 averaged.
GPU_FLAGS = (
    "--set dropout=0.1 --tokens-per-batch 12000 --steps 1000000 --steps-per-epoch 2000 "
    "--checkpoint-minutes 0.25 --keep-checkpoints 5"
).split()
# --quick's: a tiny model on pairs of at most 16 tokens (two batch shapes, two compilations).
QUICK_DEMO_FLAGS = (
    "--preset tiny --set max_length=64 --tokens-per-batch 512 --steps 1000000 "
    "--steps-per-epoch 16 --checkpoint-minutes 0.05 --keep-checkpoints 2 --max-length 16"
).split()
# --quick's XLA: its backend's optimizations off, about half a tiny program's compilation time.
QUICK_XLA_FLAGS = "--xla_backend_optimization_level=0"


def gpu_demo_flags():
    """The demo run's training flags: the demo's model and search (demo.flags), then GPU_FLAGS."""
    return [*demo_settings.flags_of("--preset", "--set", "--beam-size", "--alpha"), *GPU_FLAGS]


def probe(kind, *arguments, timeout=900):
    """The JSON answer of `python -m benchmarks.probes KIND ARGUMENTS...` in a fresh process,
    and what it wrote to stderr."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.probes", kind, *map(str, arguments)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )
    if completed.returncode:
        raise RuntimeError(f"probe {kind} failed: {completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stderr


def matmul_rate(size, dtype, repeats=10):
    """FLOP/s of a size^3 matmul through jax.numpy: the median of `repeats` after a warm-up."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    a = jax.random.normal(jax.random.key(0), (size, size)).astype(dtype)
    product = jax.jit(lambda x: x @ x)
    product(a).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product(a).block_until_ready()
        times.append(time.perf_counter() - start)
    return 2 * size**3 / float(np.median(times)), str(jnp.dtype(dtype))


def model_rows(preset, models, policy, quick, rate):
    """{preset: {model: row, "ours_over_peer": ratio}}: each of `models` (MODELS) trained on
    TOKENS target tokens a batch (a tiny batch with `quick`), each in its own process (with
    `quick`, all in one), in turn; a model that fails (out of memory, say) has its error for a
    row."""
    import numpy as np

    import keras_transformer as kt
    from benchmarks.bench import training_flops

    config = kt.TransformerConfig.preset(preset, vocab_size=37000 if not quick else 500)
    batch, length = (TOKENS // LENGTH, LENGTH) if not quick else (8, 16)
    steps, repeats = (20, 3) if not quick else (2, 2)
    arguments = {
        name: [json.dumps(config.to_dict()), batch, length, steps, repeats, name, policy]
        for name in models
    }
    failures = (RuntimeError, subprocess.TimeoutExpired)
    if quick:  # one process start for all: its failure is every model's
        several = [["model-throughput", *map(str, given)] for given in arguments.values()]
        try:
            answers, stderr = probe("several", json.dumps(several))
        except failures as error:
            return {preset: {name: error_row(error) for name in models}}
        measured = {name: (answer, stderr) for name, answer in zip(models, answers)}
    rows = {}
    for name, given in arguments.items():
        try:
            answer, stderr = measured[name] if quick else probe("model-throughput", *given)
        except failures as error:
            rows[name] = error_row(error)
            continue
        seconds = float(np.median(answer["seconds_per_step"]))
        flops = training_flops(config, batch, length, length) / seconds
        rows[name] = {
            "batch": [batch, length],
            "target_tokens_per_second": batch * length / seconds,
            "model_flops": flops,
            "of_matmul_rate": flops / rate,
            "peak_gib": answer["peak_bytes"] / 2**30 if answer["peak_bytes"] else None,
            "first_step_seconds": answer["first_seconds"],
            "params": answer["params"],
            # Keras logs it when cuDNN refuses the fused attention, then runs XLA's
            "cudnn_refused": "Failed to apply cudnn implementation" in stderr,
        }
        print(
            f"{preset} {name}: {rows[name]['target_tokens_per_second']:,.0f} tokens/s", flush=True
        )
    speed = {name: row.get("target_tokens_per_second") for name, row in rows.items()}
    if speed.get("ours") and speed.get("kerashub"):
        rows["ours_over_peer"] = speed["ours"] / speed["kerashub"]
    return {preset: rows}


def error_row(error):
    """A model's row when its probe failed: the end of the error, on one line."""
    return {"error": " ".join(str(error).split())[-1000:]}


MODEL_NAMES = {
    "ours": "keras-transformer",
    "ours-explicit": "keras-transformer, Eq. 1 written out",
    "kerashub": "KerasHub layers",
}


def loss_share(policy, quick):
    """The label-smoothed loss's share of a step (benchmarks.probes loss-share): the base
    preset's width and vocabulary, two layers, 64 x 64 tokens (tiny with `quick`)."""
    import keras_transformer as kt

    overrides = {"num_layers": 2} if not quick else {}
    config = kt.TransformerConfig.preset(
        "base" if not quick else "tiny", vocab_size=37000 if not quick else 500, **overrides
    )
    batch = 64 if not quick else 4
    return probe("loss-share", json.dumps(config.to_dict()), batch, 64, 10, policy)[0]


def step_times(sync):
    """A callback that records the time at the end of every execution (`.times`); with `sync`
    it also reads the loss, as a callback with batch hooks does (the progress bar, a NaN
    check): a host sync."""
    import keras

    class StepTimes(keras.callbacks.Callback):
        times = []

        def on_train_batch_end(self, batch, logs=None):
            if sync:
                float(logs["loss"])
            self.times.append(time.perf_counter())

    return StepTimes()


def host_share(data, quick):
    """Where a small model's step goes on the host (d_model 16, 256 tokens a batch: the
    device's work is slight):
    ms per step of the numpy loader alone, and of `fit` with one host sync per step (a
    callback with batch hooks) and without, at 1 and 16 steps per execution; the distinct
    batch shapes (one compilation each) and the time of the steps that compiled."""
    import keras
    import numpy as np

    import keras_transformer as kt
    from keras_transformer.data.binarized import Binarized, ahead

    folder = Binarized(data)
    tokens, max_length = (32, 8) if quick else (256, 32)  # quick: one or two shapes
    steps = 16 if quick else 400

    def batches(seed):
        return folder.batches("train", tokens, max_length, seed=seed)

    loader = batches(0)
    next(loader)  # its first batch orders a whole pass
    start = time.perf_counter()
    for _ in zip(range(steps), loader):
        pass
    loader_ms = (time.perf_counter() - start) / steps * 1000
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=folder.vocab_size, d_model=16, d_ff=32, num_heads=2, num_layers=1
    )
    rows = {"loader_ms_per_batch": loader_ms}
    for name, execution, sync in (
        ("sync every step", 1, True),
        ("no sync", 1, False),
        ("16 steps per execution", 16, True),
    ):
        keras.utils.set_random_seed(0)
        model = kt.build_transformer(config)
        model.compile(
            optimizer=kt.create_optimizer(config),
            loss=kt.LabelSmoothedCrossEntropy(token_weights=True),
            jit_compile=True,
            steps_per_execution=execution,
        )
        timing = step_times(sync)
        first = time.perf_counter()
        model.fit(ahead(batches(1)), steps_per_epoch=steps, epochs=2, verbose=0,
                  callbacks=[timing], shuffle=False)  # fmt: skip
        times = np.diff([first, *timing.times]) / execution
        second_epoch = times[len(times) // 2 :]  # every shape compiled in the first
        rows[name] = {"ms_per_step": float(np.median(second_epoch) * 1000)}
        if name == "no sync":
            shapes = {batch[1].shape for _, batch in zip(range(steps), batches(1))}
            slow = times[: len(times) // 2] > 5 * np.median(second_epoch)
            rows["compiles"] = {
                "shapes": len(shapes),
                "slow_steps": int(slow.sum()),
                "seconds_in_slow_steps": float(times[: len(times) // 2][slow].sum()),
            }
    return rows


def demo_run(data, minutes, out_dir, demo_flags):
    """`python -m training.train` on binarized data for `minutes`: its steps, steps/s after
    the first epoch (from the step summaries' wall times: compilation left out), the last
    validation loss, and the model.keras it wrote."""
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util.tensor_util import make_ndarray

    from keras_transformer_cli.run_dir import RunDirectory

    run = RunDirectory(pathlib.Path(out_dir) / "demo-run")
    run_dir = run.path
    command = [sys.executable, "-m", "training.train", "--dataset", f"binarized:{data}",
               *demo_flags, "--max-minutes", str(minutes), "--run-dir", str(run_dir)]  # fmt: skip
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if completed.returncode:
        raise RuntimeError(f"the demo run failed: {completed.stderr[-3000:]}")
    events = {}
    for kind in ("train", "validation"):
        for path in sorted((run.logs / kind).glob("events.out.tfevents.*")):
            accumulator = event_accumulator.EventAccumulator(str(path))
            accumulator.Reload()
            for tag in accumulator.Tags()["tensors"]:
                events.setdefault(f"{kind}/{tag}", []).extend(accumulator.Tensors(tag))
    losses = events["train/batch_loss"]
    first, last = losses[min(1, len(losses) - 1)], losses[-1]  # after the first: compiled
    rate = (last.step - first.step) / (last.wall_time - first.wall_time) if last != first else None
    validation = events.get("validation/epoch_loss", [])
    device = next(
        (line for line in completed.stderr.splitlines() if line.startswith("Keras backend")), ""
    )
    return {
        "command": " ".join(["python", *command[1:]]),
        "wall_seconds": seconds,
        "steps": losses[-1].step,
        "steps_per_second": rate,
        "validation_loss": [(e.step, float(make_ndarray(e.tensor_proto))) for e in validation],
        "model": str(run.model),
        "devices": device,
    }


def information():
    import jax
    import keras

    devices = jax.devices()
    return {
        "date": datetime.date.today().isoformat(),
        "device": getattr(devices[0], "device_kind", str(devices[0])),
        "devices": len(devices),
        "platform": devices[0].platform,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "keras": keras.__version__,
        "backend": keras.backend.backend(),
    }


def build_parser():
    parser = flags.parser(__doc__, "benchmarks.gpu")
    parser.add_argument(
        "--data",
        type=pathlib.Path,
        required=True,
        help="binarized data (python -m training.binarize; make gpu-bundle writes Ding's)",
    )
    flags.add_parts(parser, PARTS)
    parser.add_argument(
        "--demo-minutes", type=flags.positive, default=3.5, help="the demo run's --max-minutes"
    )
    parser.add_argument(
        "--demo-flags",
        default="",
        help="more training.train flags for the demo run, e.g. '--tokens-per-batch 3000 "
        "--steps-per-execution 1' (they override the run's own)",
    )
    flags.add_quick(parser)
    parser.add_argument(
        "--output-dir",
        type=pathlib.Path,
        default=ROOT / "benchmarks",
        help="where GPU.md, GPU.json and the demo run (demo-run/) go",
    )
    return parser


@console.program
def main(argv=None):
    os.environ.setdefault("KERAS_BACKEND", "jax")
    # Each process takes the device memory it uses, not JAX's default 75% of it: the probes and
    # the demo run start beside this one, and the peak memory measured is the model's own.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    args = flags.parse(build_parser(), argv)
    if args.quick:  # tiny programs compile in half the time; the processes started inherit it
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {QUICK_XLA_FLAGS}".strip()
    import keras

    if keras.backend.backend() != "jax":
        console.fail("benchmarks.gpu measures under KERAS_BACKEND=jax", status=2)
    from keras_transformer.data.binarized import Binarized, BinarizedError

    try:
        Binarized(args.data).split("train")
    except BinarizedError as error:
        console.fail(f"--data: {error}")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results = {"information": information(), "arguments": sys.argv[1:] if argv is None else argv}
    gpu = results["information"]["platform"] == "gpu"
    size, dtype = (8192, "bfloat16") if gpu else (256 if args.quick else 2048, "float32")
    rate, dtype = matmul_rate(size, dtype)
    results["matmul"] = {"size": size, "dtype": dtype, "flops": rate}
    print(f"matmul {size}^3 {dtype}: {rate / 1e12:.1f} TFLOP/s", flush=True)
    policy = "mixed_bfloat16" if gpu else "float32"
    presets = ("base", "big") if not args.quick else ("tiny",)
    # In the order of what matters most, each written when done: a run cut short keeps the rest.
    first = MODELS if not args.quick else PEERS  # the written-out Eq. 1 is base's A/B
    steps = [("models", lambda: model_rows(presets[0], first, policy, args.quick, rate))]
    demo_flags = [*(QUICK_DEMO_FLAGS if args.quick else gpu_demo_flags()), *args.demo_flags.split()]
    steps += [("demo", lambda: demo_run(args.data, args.demo_minutes, args.output_dir, demo_flags))]
    steps += [("host", lambda: host_share(args.data, args.quick))]
    steps += [("loss", lambda: loss_share(policy, args.quick))]
    steps += [
        ("models", lambda preset=preset: model_rows(preset, PEERS, policy, args.quick, rate))
        for preset in presets[1:]
    ]
    results["models_policy"] = policy
    for part, measure in steps:
        if part not in (args.parts or PARTS):
            continue
        try:
            measured = measure()
        except Exception as error:  # written down; the other parts still run
            measured = {"error": " ".join(str(error).split())[-1500:]}
            print(f"{part}: {measured['error']}", file=sys.stderr, flush=True)
        if part == "models":
            results.setdefault("models", {}).update(measured)
        else:
            results[part] = measured
            print(json.dumps(measured, indent=1), flush=True)
        (args.output_dir / "GPU.json").write_text(json.dumps(results, indent=2))
        (args.output_dir / "GPU.md").write_text(report(results))
    print(f"written: {args.output_dir / 'GPU.md'}, {args.output_dir / 'GPU.json'}")


def report(results):
    """GPU.md from the results."""
    results = dict(results)  # a failed part is taken out below
    info, matmul = results["information"], results["matmul"]
    lines = [
        "# Training on an accelerator (`python -m benchmarks.gpu`)",
        "",
        f"{info['date']}: {info['device']} x{info['devices']} ({info['platform']}), Python "
        f"{info['python']}, JAX {info['jax']}, Keras {info['keras']} ({info['backend']}). "
        f"Command: `python -m benchmarks.gpu {' '.join(map(str, results['arguments']))}`.",
        "",
        f"Matmul {matmul['size']}^3 {matmul['dtype']}: {matmul['flops'] / 1e12:.1f} TFLOP/s, "
        "the ceiling below.",
    ]
    if "models" in results:
        lines += models_section(results["models"], results["models_policy"])
    for part in ("host", "loss", "demo"):
        if "error" in results.get(part, {}):
            lines += ["", f"## {part}: failed", "", results.pop(part)["error"]]
    for part, section in (("host", host_section), ("loss", loss_section), ("demo", demo_section)):
        if part in results:
            lines += ["", *section(results[part])]
    return "\n".join(lines) + "\n"


def models_section(models, policy):
    lines = [
        "",
        f"## Training step, about {TOKENS:,} target tokens a batch ({policy})",
        "",
        "| preset | model | target tokens/s | model TFLOP/s | of the matmul rate | peak memory | "
        "first step (compile) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for preset, rows in models.items():
        for name, row in rows.items():
            if name == "ours_over_peer":
                continue
            if "error" in row:
                lines.append(f"| {preset} | {MODEL_NAMES[name]} | failed: {row['error'][-200:]} |")
                continue
            peak = f"{row['peak_gib']:.1f} GiB" if row["peak_gib"] else "-"
            refused = " (cuDNN refused the fused attention)" if row["cudnn_refused"] else ""
            lines.append(
                f"| {preset} | {MODEL_NAMES[name]}{refused} | "
                f"{row['target_tokens_per_second']:,.0f} | {row['model_flops'] / 1e12:.1f} | "
                f"{row['of_matmul_rate']:.0%} | {peak} | {row['first_step_seconds']:.1f} s |"
            )
        if "ours_over_peer" in rows:
            lines.append(f"| {preset} | ours / peer | {rows['ours_over_peer']:.2f}x | | | | |")
    return lines


def host_section(host):
    return [
        "## The host's share of a small model's step (d_model 16, 256 tokens a batch)",
        "",
        f"- numpy loader alone: {host['loader_ms_per_batch']:.2f} ms a batch",
        *(
            f"- `fit`, {name}: {host[name]['ms_per_step']:.2f} ms a step"
            for name in ("sync every step", "no sync", "16 steps per execution")
        ),
        "- batch shapes (one compilation each): {shapes}; slow first steps {slow_steps}, "
        "{seconds_in_slow_steps:.1f} s in all".format(**host["compiles"]),
    ]


def loss_section(loss):
    return [
        "## The loss's share of a step (base width and vocabulary, 2 layers, 64 x 64 tokens)",
        "",
        *(
            f"- {name}: {loss['ms'][name]:.2f} ms a step"
            + (f", {loss['share'][name]:.0%} of it the loss" if name in loss["share"] else "")
            for name in loss["ms"]
        ),
    ]


def demo_section(demo):
    last = demo["validation_loss"][-1] if demo["validation_loss"] else None
    rate = (
        f"{demo['steps_per_second']:.1f} steps/s after the first step summary"
        if demo["steps_per_second"]
        else "too few step summaries for a rate"
    )
    return [
        "## The demo's model from binarized data",
        "",
        f"`{demo['command']}`",
        "",
        f"- {demo['devices']}",
        f"- {demo['steps']} steps in {demo['wall_seconds']:.0f} s of wall time (start, "
        f"compilation and the end's averaging included); {rate}",
        f"- validation loss {last[1]:.3f} at step {last[0]}" if last else "- no validation",
        f"- model: `{demo['model']}`",
    ]


if __name__ == "__main__":
    main()
