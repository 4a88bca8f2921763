"""The training and evaluation programs: `python -m training.train`, `training.evaluate`,
`training.average_checkpoints`, `training.summary`, `training.prepare_ding`. Importing them sets
nothing up: each `main()` does (`keras_transformer_cli.console.start`)."""
