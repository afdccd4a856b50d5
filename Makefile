# One virtual environment, made once from the pinned requirements; every target below uses it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup fuzz test lint bench clean

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

setup: $(STAMP)

fuzz: $(STAMP)   ## the main job: the conformance campaign over every built-in implementation
	$(PY) -m fuzz $(ARGS)

test: $(STAMP)   ## the whole test suite on every core (CI runs this)
	$(PY) -m pytest -n auto --dist load --maxschedchunk 1 $(ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	$(PY) -m bench $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .benchmarks
