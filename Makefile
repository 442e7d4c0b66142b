# make train  -> set up .venv (Python 3.12) and train the default model; extra CLI flags via ARGS="--key=value ..."
# make test   -> set up .venv and run the CPU test suite
# make lint   -> ruff
VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= default
ARGS ?=

.PHONY: setup train test lint clean-venv

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@PY312=$$(tools/find-python312.sh) && echo "using $$PY312" && $$PY312 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

train: setup
	$(PY) -m jax_mamba.train --config $(CONFIG) $(ARGS)

test: setup
	$(PY) -m pytest -q tests $(ARGS)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean-venv:
	rm -rf $(VENV)
