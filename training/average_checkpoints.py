"""Average the weights of a run's last step checkpoints (as the paper does for its final models)
and save the result as a .keras model.

python -m training.average_checkpoints --run-dir runs/demo --last 5 \
    --output runs/demo/averaged.keras
"""

import pathlib

from keras_transformer_cli import console, flags


def build_parser():
    parser = flags.parser(__doc__, "training.average_checkpoints")
    flags.add_run_dir(parser)
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument(
        "--last",
        type=flags.COUNT,
        default=5,
        help="how many of the latest checkpoints (the paper: 5 for base, 20 for big models)",
    )
    chosen.add_argument(
        "--checkpoints",
        type=pathlib.Path,
        nargs="+",
        default=None,
        help="average these checkpoint files instead of the last ones",
    )
    flags.add_output(parser, "the averaged .keras model (default: RUN_DIR/averaged.keras)")
    return parser


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)

    from keras_transformer_cli import checkpoints
    from keras_transformer_cli.files import write_atomically
    from keras_transformer_cli.run_dir import RunDirectory

    run = RunDirectory(args.run_dir)
    paths = args.checkpoints or checkpoints.list_checkpoints(run.checkpoints)[-args.last :]
    output = args.output or run.path / "averaged.keras"
    try:
        if not run.settings_file.is_file():
            raise ValueError(
                f"--run-dir {run}: no {run.settings_file.name} in it; it is not a run directory"
            )
        if not paths:
            raise ValueError(f"{run.checkpoints} holds no checkpoints")
        if output.suffix != ".keras":
            raise ValueError(f"--output {output}: the file name must end in .keras")
        model = checkpoints.averaged_model(run, paths)
    except (ValueError, OSError) as error:
        console.fail(error)
    write_atomically(output, model.save)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {output}")


if __name__ == "__main__":
    main()
