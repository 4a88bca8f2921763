"""Names imported on first use (PEP 562), so that a package imports without TensorFlow and says
so, when one of its names needs it, naming what needs it and what does not."""

import importlib

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
