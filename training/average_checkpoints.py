"""Average the last checkpoints of a run into one model (§6.1).

python -m training.average_checkpoints runs/demo --last 5 --output runs/demo/averaged.keras
"""

import argparse
import pathlib

from training.console import add_verbose_flag


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m training.average_checkpoints",
        description="Average the weights of a run's last step checkpoints (as the paper does "
        "for its final models) and save the result as a .keras model.",
    )
    parser.add_argument(
        "run_dir", type=pathlib.Path, help="the run directory (holding run.json and checkpoints/)"
    )
    parser.add_argument(
        "--last",
        type=int,
        default=5,
        help="how many of the latest checkpoints (default: 5; the paper's big models: 20)",
    )
    parser.add_argument(
        "--checkpoints",
        type=pathlib.Path,
        nargs="+",
        default=None,
        help="average these checkpoint files instead of the last ones",
    )
    parser.add_argument(
        "--output",
        type=pathlib.Path,
        default=None,
        help="the averaged .keras model (default: RUN_DIR/averaged.keras)",
    )
    add_verbose_flag(parser)
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error("--last must be at least 1")

    from training import checkpoints, run_dir
    from training.files import write_atomically

    paths = (
        args.checkpoints or checkpoints.list_checkpoints(args.run_dir / "checkpoints")[-args.last :]
    )
    output = args.output or args.run_dir / "averaged.keras"
    try:
        if not (args.run_dir / run_dir.SETTINGS_FILE).is_file():
            raise ValueError(
                f"{args.run_dir} holds no {run_dir.SETTINGS_FILE}; it is not a run directory"
            )
        if not paths:
            raise ValueError(f"{args.run_dir / 'checkpoints'} holds no checkpoints")
        if output.suffix != ".keras":
            raise ValueError(f"--output {output}: the file name must end in .keras")
        model = run_dir.build_model(args.run_dir)
        checkpoints.assign(
            model,
            checkpoints.average_checkpoints(paths),
            source=f"the average of {len(paths)} checkpoints",
        )
    except (ValueError, OSError) as error:
        parser.exit(1, f"error: {error}\n")
    write_atomically(output, model.save)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {output}")


if __name__ == "__main__":
    main()
