"""The training and evaluation programs: `python -m training.train`, `python -m training.evaluate`,
`python -m training.average_checkpoints`, `python -m training.summary`."""

import os

from training.console import quiet_tensorflow_logs

quiet_tensorflow_logs()  # before any program imports TensorFlow; see training/console.py
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
