"""The training and evaluation programs: `python -m training.train`, `python -m training.evaluate`,
`python -m training.average_checkpoints`, `python -m training.summary`."""

import os

from training.console import quiet_tensorflow_logs

quiet_tensorflow_logs()  # before any program imports TensorFlow; see training/console.py
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's pooling (BFC) allocator for host memory, read when TensorFlow starts. The default
# allocator maps and unmaps every large tensor (a [B, T, vocab] logits tensor is ~100 MB), so each
# step pays page faults on fresh memory: on 2 CPU cores the pool makes a small-preset training
# step about 1.25x as fast (benchmarks/README.md). `TF_CPU_ALLOCATOR_USE_BFC=false` turns it off.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
