"""Put this folder and tests/ first on PYTHONPATH (`WITHOUT_TENSORFLOW` in tests/conftest.py) and
every Python process, the children of a program too, runs as on a machine without TensorFlow:
Python imports `sitecustomize` at start-up."""

import blocking

blocking.install(report=True)
