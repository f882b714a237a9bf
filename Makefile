# Two commands set everything up on a fresh machine:
#   make run   -> creates .venv, installs dcpsim, runs the main job on built-in defaults
#   make test  -> creates .venv, installs dcpsim with all extras, runs the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-slow lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml setup.py | $(BIN)/python
	# torch is pinned to the CPU build that the test machine ships; other
	# extras resolve normally.
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[dev,profile,distributed]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/dcpsim demo

# the default suite runs on every core (pytest-xdist, -n auto; --dist worksteal: an idle worker takes tests from a busy
# one, so one long module no longer ends the run alone; 64 s on a fresh clone of 8b585a4 on the 2-core reference host)
# a plain `pytest -q` runs the same tests serially
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist worksteal

# the heavy checks (marker `slow`: wheel install, full reproductions); exit 5 = none collected, not a failure
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow; rc=$$?; if [ $$rc -eq 5 ]; then echo "no slow tests collected"; rc=0; fi; exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check dcpsim tests benchmarks

bench: $(STAMP)
	$(BIN)/python -m pytest -q -m benchmark --benchmark-enable benchmarks tests

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info dcpsim/_data
