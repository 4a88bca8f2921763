"""The training and evaluation programs: `python -m training.train`, `python -m training.evaluate`,
`python -m training.average_checkpoints`."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TensorFlow's C++ INFO lines drown the programs' output
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
