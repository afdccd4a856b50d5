# One virtual environment, made once from the pinned requirements; every target below uses it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup fuzz test lint bench clean lock

# The lock's two halves (every package of requirements.txt, pinned; lock/generate.py) install at once, one pip
# each: a pip process unpacks and byte-compiles on one core. No package is in both; `pip check` checks the whole.
$(STAMP): requirements.txt lock/first-half.txt lock/second-half.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-deps -r lock/first-half.txt & first=$$!; \
	$(PY) -m pip install --quiet --no-deps -r lock/second-half.txt; second=$$?; \
	wait $$first && test $$second -eq 0
	$(PY) -m pip check || { echo "the lock misses what requirements.txt needs: run make lock"; exit 1; }
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

lock:   ## rewrite lock/*.txt from requirements.txt (after editing it), in a scratch venv
	$(PYTHON) lock/generate.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .benchmarks
