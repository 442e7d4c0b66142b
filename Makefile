# make train        -> set up .venv (Python 3.12) and train the default model; CLI flags via ARGS="--key=value ..."
# make test         -> set up .venv with the PyTorch side too, and run the test suite (parity tests included)
# make test-quick   -> the quick tier (tests/tiers.py QUICK): every package and kernel path once, a few minutes
# make test-seeds   -> the tolerance-heavy test files at SEEDS fresh random seeds (default 3)
# make clean-test-cache -> delete the compiled programs the tests keep between runs (tests/compile_cache.py)
# make setup-torch  -> add PyTorch, mamba-ssm (from its sdist, CUDA build skipped) and NVlabs' mambavision to .venv
# make lint         -> ruff
VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= default
ARGS ?=
# pytest-xdist processes for `make test`, each taking one test file at a time
TEST_WORKERS ?= 2
SEEDS ?= 3

MAMBA_SSM := mamba-ssm==2.3.2.post1
MAMBAVISION := mambavision==1.2.0
MAMBA3_JAX := mamba3-jax==1.0.1

.PHONY: setup setup-torch train test test-quick test-seeds clean-test-cache lint clean-venv

setup: $(VENV)/.installed

setup-torch: $(VENV)/.installed-torch

$(VENV)/.installed: pyproject.toml
	@PY312=$$(tools/find-python312.sh) && echo "using $$PY312" && $$PY312 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

# mamba-ssm's setup.py needs torch importable (no build isolation); CUDA kernels are skipped here and built on a GPU
# machine by `python -m torch_reference.build`. NVlabs' mambavision (pure Python) pins mamba-ssm 2.2.4, timm 1.0.15 and
# transformers 4.50: installed without its dependencies, beside ours.
$(VENV)/.installed-torch: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[dev,torch]"
	MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE $(PY) -m pip install --quiet --no-build-isolation --no-deps "$(MAMBA_SSM)"
	$(PY) -m pip install --quiet --no-deps "$(MAMBAVISION)" "$(MAMBA3_JAX)"
	touch $@

train: setup
	$(PY) -m jax_mamba.train --config $(CONFIG) $(ARGS)

test: setup-torch
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 tests $(ARGS)

test-quick: setup-torch
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=10 -m quick tests $(ARGS)

test-seeds: setup-torch
	$(PY) -m tests.seeds --count $(SEEDS) --workers $(TEST_WORKERS) -- $(ARGS)

clean-test-cache: setup
	$(PY) -m tests.compile_cache --clear

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean-venv:
	rm -rf $(VENV)
