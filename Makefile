# rocelab: every target installs what it needs first (`setup` is idempotent and quick).
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.rocelab-installed
VSTAMP := $(VENV)/.rocelab-venv
TOPOLOGY ?= topologies/clos-2x4.yaml

.PHONY: setup venv demo lint test test-quick fuzz test-integration bench golden docs-images clean down-all

setup: $(STAMP)
	@scripts/setup-system.sh
	@$(PY) -m emulator.rxe.guest fetch  # rxe hosts' guest kernel (Debian's, with rdma_rxe) into .cache/

WIRE  := setup.py emulator/roce/_wire.c $(wildcard emulator/roce/_wire_*.h)  # the compiled data path

$(STAMP): pyproject.toml $(WIRE)
	@scripts/setup-system.sh
	@$(MAKE) --no-print-directory venv
	@touch $@

venv: $(VSTAMP)  ## the virtualenv alone (no root, no apt): all the unit tests need

$(VSTAMP): pyproject.toml $(WIRE)
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null
	@$(PY) -m pip install -q -e '.[test]'
	@touch $@

demo:  ## the main job on the default topology (scripts/demo.sh runs setup itself, into a log)
	@scripts/demo.sh $(TOPOLOGY)

lint: setup  ## ruff over the tree (with complexity caps), mypy over every module (both configured in pyproject.toml)
	$(VENV)/bin/ruff check emulator tests
	$(VENV)/bin/mypy

test: lint  ## lint, then unit tests (first: a failure stops the run) + integration + examples (root)
	$(PY) -m pytest tests examples --durations=25

fuzz: setup  ## property-based fuzz of topology and experiment files and of the command line: many examples, fresh randomness
	ROCELAB_FUZZ_EXAMPLES=3000 ROCELAB_FUZZ_RANDOM=1 $(PY) -m pytest tests/unit/test_fuzz.py tests/unit/test_cli_fuzz.py

test-quick: venv  ## no-root unit tests only: needs the virtualenv, not root or apt
	$(PY) -m pytest tests/unit

test-integration: setup
	$(PY) -m pytest tests/integration

bench: setup  ## performance figures as JSON, with same-run baselines
	$(PY) -m emulator.bench

golden: setup  ## regenerate golden files after an intended change; review the diff
	ROCELAB_UPDATE_GOLDEN=1 $(PY) -m pytest tests/unit -q -k golden

docs-images: setup  ## redraw docs/images/ from a real incast run (root), with its numbers
	@scripts/docs-images.sh

down-all: setup
	$(VENV)/bin/rocelab down --all

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
