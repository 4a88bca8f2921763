# `make demo` and `make test` create .venv and install everything they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test test-quick bench quality data venv clean gpu-bundle

venv: $(INSTALLED)

# uv installs the project into the venv pip made (the same packages as `pip install`, downloaded
# and unpacked in parallel: less than half of pip's time), byte code compiled as pip compiles it.
$(INSTALLED): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -e ".[tensorflow,dev]"
	touch $@

# Two pytest processes (pytest-xdist): on 2 cores the suite takes about 2/3 of the time of one.
# tests/conftest.py puts the slow tests first and hands each worker the next test, or the next
# module whose tests share a module's fixture, when it is nearly free (--dist loadscope in that
# order): the workers start on the long work and end together on quick tests.
PYTEST_WORKERS ?= 2
PYTEST_DIST := -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder

test: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest $(PYTEST_DIST) $(PYTEST_ARGS)

# The tests not marked slow (those that train a model or start processes): a few minutes, for
# every edit; `make test` runs them all.
test-quick: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest $(PYTEST_DIST) -m "not slow" $(PYTEST_ARGS)

# The embedded German-English corpus (Debian's trans-de-en, GPL-2+), fetched and prepared once
# into ~/.cache/keras_transformer (or $$KERAS_TRANSFORMER_CACHE); never into the repository.
data: $(INSTALLED)
	$(BIN)/python -m training.prepare_ding

# The README's main job: fetch the Ding corpus, train on the CPU for DEMO_MINUTES with the settings
# in demo.flags (one training flag a line; the quality study, benchmarks/quality.py, and the
# benchmarks read the same file), which the study chose on validation (benchmarks/QUALITY.md: the
# small preset narrowed to d_model 192, d_ff 768 and 2+2 layers, no residual dropout but dropout
# 0.1 on the feed-forward network's hidden ReLU, label smoothing 0.2, an 8000-piece vocabulary,
# Ding's word and phrase pairs with the sentence pairs 10 times, 2000 tokens a batch; the average
# of the last 40 checkpoints, 25 steps apart (DEMO_ARGS="--keep-checkpoints 10" where 14 minutes
# reach only about 1600 steps, so that the average stays clear of the warm-up), beam 4, alpha
# 1.2; the time budget alone ends training; tests/test_quality.py checks that these are the
# study's), print its test BLEU and chrF, export it and translate a few German sentences.
DEMO_DIR ?= runs/demo
DEMO_EXPORT ?= exports/transformer
DEMO_MINUTES ?= 14
DEMO_SETTINGS ?= $(shell cat demo.flags)
DEMO_ARGS ?=

demo: $(INSTALLED)
	$(BIN)/python -m training.prepare_ding --phrases
	$(BIN)/python -m training.train $(DEMO_SETTINGS) --max-minutes $(DEMO_MINUTES) \
		--run-dir "$(DEMO_DIR)" --export-dir "$(DEMO_EXPORT)" $(DEMO_ARGS)
	$(BIN)/python -m serving.translate --model "$(DEMO_EXPORT)" "Guten Morgen." \
		"Das Haus ist sehr alt." "Ich habe heute keine Zeit." "Wo ist der Bahnhof?" \
		"Er spricht gut Englisch."
	$(BIN)/python -m training.summary --run-dir "$(DEMO_DIR)" --export-dir "$(DEMO_EXPORT)" --demo

# Speed and memory against peers measured in the same run (about an hour on a 2-core machine,
# docs/benchmarks.md; the served path translates the Ding test split with `make demo`'s model
# where it has run, else with a model of its shape trained 1000 steps): rewrites
# benchmarks/README.md and results.json.
SERVED_MODEL = $(wildcard $(DEMO_DIR)/model.keras)

bench: $(INSTALLED)
	$(BIN)/python -m training.prepare_ding --phrases
	$(BIN)/python -m benchmarks.bench $(if $(SERVED_MODEL),--served-model $(SERVED_MODEL)) \
		$(BENCH_ARGS)

# What an offline GPU machine with JAX and no TensorFlow needs for `python -m benchmarks.gpu`
# (docs/backends-and-gpus.md), in one folder to copy beside the repository (under 60 MiB): Ding
# binarized with a 4000-piece vocabulary (the one benchmarks/GPU.md measured; the phrase mixture)
# and the wheels of Keras, KerasHub and the two pure-Python or binary needs such an image lacks,
# for Python 3.12 on x86-64.
GPU_BUNDLE ?= build/gpu-bundle
GPU_PYTHON ?= 3.12
GPU_PLATFORMS := $(foreach n,manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014,--platform $(n)_x86_64)

gpu-bundle: $(INSTALLED)
	$(BIN)/python -m training.prepare_ding --phrases
	test -e $(GPU_BUNDLE)/ding || $(BIN)/python -m training.binarize --dataset ding --phrases \
		--sentence-repeats 10 --vocab-size 4000 --output $(GPU_BUNDLE)/ding
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) \
		--implementation cp $(GPU_PLATFORMS) -d $(GPU_BUNDLE)/wheels \
		$$($(BIN)/pip list --format=freeze 2>/dev/null | grep -E -i '^(keras|keras-hub|namex|optree)==')
	du -sh $(GPU_BUNDLE)

# The study of the demo's settings (hours; resumable): rewrites benchmarks/QUALITY.md and
# QUALITY.json.
quality: $(INSTALLED)
	$(BIN)/python -m benchmarks.quality $(QUALITY_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
