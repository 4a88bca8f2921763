"""The programs of keras-transformer, installed as the `kt-*` commands, and what they share.

Installed, this package holds the programs as `keras_transformer_cli.training` and
`keras_transformer_cli.serving`; in a checkout they sit at the repository's top as `training/`
and `serving/` (`python -m training.train`). Its own modules are what the programs (and
`benchmarks/`) share: the console, the flag vocabulary, atomic files, a run directory and its
checkpoints, TensorFlow Serving's version directories, the choice of translator for `--model`
(`translators.py`, over `kt.load_translator`) and the attention plot TensorBoard shows. They import
only the library (`keras_transformer`), never a program; importing them has no side effects."""
