"""Programs around the exported model: export it, and translate with it."""

from training.console import quiet_tensorflow_logs

quiet_tensorflow_logs()  # before any program imports TensorFlow; see training/console.py
