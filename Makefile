# `make test` and (later) `make demo` create .venv and install everything they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: test data venv clean

venv: $(INSTALLED)

$(INSTALLED): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

test: $(INSTALLED)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The embedded German-English corpus (Debian's trans-de-en, GPL-2+), fetched and prepared once
# into ~/.cache/keras_transformer (or $$KERAS_TRANSFORMER_CACHE); never into the repository.
data: $(INSTALLED)
	$(BIN)/python -m keras_transformer.data.ding

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
