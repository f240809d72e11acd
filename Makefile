# The two set-up commands of the README: `make run` (the demo) and `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test lint docs system-deps traces traces-present bench keda-stubs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

## run: install into .venv and run the embedded demo (no cluster, no Prometheus needed)
run: $(STAMP)
	$(BIN)/gpu-autoscaler serve

## system-deps: Debian packages the tests drive for real (Prometheus), installed when missing
system-deps:
	@scripts/install-system-deps.sh

## traces: download the public traces the tests read (pinned sha256) into $GPU_TRACES_DIR (tests/traces.py);
## without network it stops with one line: what failed, and where to point GPU_TRACES_DIR instead
traces: $(STAMP)
	@$(BIN)/python -m tests.traces fetch

## traces-present: are the traces there (the tests' own lookup, tests/traces.py)? Standard library only,
## so it runs with the system's python3 in a second, before anything is installed
traces-present:
	@$(PYTHON) -m tests.traces check

## lint: ruff, mypy and the package layering contracts
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

## docs: the documentation site (mkdocs.yml) into build/site; --strict fails on any broken link or anchor
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## test: the traces first (a clone without them stops at once, with one line), then everything the suite
## needs, lint and the documentation site side by side (each mostly waits on one core), and the whole
## test suite (about 13-14 minutes on 2 cores)
test: traces-present $(STAMP) system-deps
	@$(MAKE) --no-print-directory -j2 lint docs
	$(BIN)/pytest

## bench: speed and memory figures (prints them; not part of the suite)
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_forecast.py

## keda-stubs: regenerate autoscaler/keda's gRPC stubs from the vendored proto (commit the result)
keda-stubs: $(STAMP)
	PYTHON=$(BIN)/python scripts/generate-keda-stubs.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-artifacts build/site
