"""What the programs (`training/`, `serving/`, `benchmarks/`) share: the console, the flag
vocabulary, atomic files, a run directory and its checkpoints, TensorFlow Serving's version
directories and the engines that translate with a saved model. It imports only the library
(`keras_transformer`), never a program; importing it has no side effects."""
