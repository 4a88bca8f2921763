"""Names imported on first use (PEP 562), so that a package imports without Keras or TensorFlow
and says so, when one of its names needs TensorFlow, naming what needs it and what does not;
and the import of a package's Keras classes once Keras is imported, so that Keras finds them
registered when it loads a .keras file."""

import importlib
import importlib.abc
import os
import sys

TENSORFLOW_PACKAGES = ("tensorflow", "tensorflow_text", "tensorflow_datasets")


def lazy_attribute(package, table, name, needs):
    """The attribute `name` of the package named `package`, from the module `table` maps it
    to, cached in the package. AttributeError for a name not in `table`; ImportError
    "PACKAGE.NAME needs TensorFlow (...): `needs`" when a TensorFlow package is missing."""
    module_name = table.get(name)
    if module_name is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in TENSORFLOW_PACKAGES:
            raise
        raise ImportError(
            f"{package}.{name} needs TensorFlow ({error.name} is not installed): {needs}"
        ) from error
    value = module if module_name.endswith(f".{name}") else getattr(module, name)
    setattr(importlib.import_module(package), name, value)
    return value


class KerasClasses:
    """The modules of the package `package` that register Keras classes
    (`keras.saving.register_keras_serializable`), imported as soon as Keras is and no module of
    the package is midway through its own import (its names not all defined yet): when the
    package is imported after Keras, else when the import of Keras, or of a module of the
    package, ends, or at a lazy name of the package (`import_if_keras`). Keras imported after
    the package runs on `backend` unless KERAS_BACKEND names another."""

    def __init__(self, package, modules, backend):
        self.package, self.modules, self.backend, self.imported = package, modules, backend, False
        self.running = set()  # the modules of the package whose code is running

    def watch(self):
        """Imports the modules now if Keras is imported, else watches the imports to come."""
        self.import_if_keras()
        if not self.imported:
            sys.meta_path.insert(0, _ImportWatch(self))

    def import_if_keras(self):
        """Imports the modules, once, if Keras is imported and no module of the package is
        running its code."""
        if self.imported or self.running or "keras" not in sys.modules:
            return
        self.imported = True
        for module in self.modules:
            importlib.import_module(module)

    def watches(self, name):
        return not self.imported and (name == "keras" or name.startswith(f"{self.package}."))


class _ImportWatch(importlib.abc.MetaPathFinder):
    """Finds Keras and the modules of a package through the other finders, and has their loader
    call `KerasClasses.import_if_keras` once a module's code has run."""

    def __init__(self, classes):
        self.classes = classes

    def find_spec(self, name, path=None, target=None):
        if not self.classes.watches(name):
            return None
        if name == "keras":
            os.environ.setdefault("KERAS_BACKEND", self.classes.backend)
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(name, path, target)
            if spec is not None:
                break
        if spec is not None and spec.loader is not None:
            spec.loader.exec_module = self.watched(name, spec.loader.exec_module)
        return spec

    def watched(self, name, exec_module):
        running = self.classes.running

        def exec_then_import(module):
            running.add(name)
            try:
                exec_module(module)
            finally:
                running.discard(name)
            self.classes.import_if_keras()

        return exec_then_import
