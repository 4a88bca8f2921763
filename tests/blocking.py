"""A machine without TensorFlow, imitated: every import of tensorflow or tensorflow_text fails,
as it does where they are not installed."""

import atexit
import importlib.abc
import sys


class BlockTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def install(report=False):
    """Blocks the imports in this process; with `report`, writes `tensorflow imported: True|False`
    to stderr at exit, so that a test sees that nothing imported it some other way."""
    sys.meta_path.insert(0, BlockTensorFlow())
    if report:
        atexit.register(
            lambda: sys.stderr.write(f"tensorflow imported: {'tensorflow' in sys.modules}\n")
        )
