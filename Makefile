# The two set-up commands of the README: `make run` (the demo) and `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test lint docs system-deps traces bench keda-stubs clean

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

## traces: download the public traces the tests read (pinned sha256) into $GPU_TRACES_DIR (tests/traces.py)
traces: $(STAMP)
	$(BIN)/python -m tests.traces fetch

## lint: ruff, mypy and the package layering contracts
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

## docs: the documentation site (mkdocs.yml) into build/site; --strict fails on any broken link or anchor
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## test: everything the suite needs, then lint, the documentation site and the whole test suite
test: $(STAMP) system-deps lint docs
	$(BIN)/pytest

## bench: speed and memory figures (prints them; not part of the suite)
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_forecast.py

## keda-stubs: regenerate autoscaler/keda's gRPC stubs from the vendored proto (commit the result)
keda-stubs: $(STAMP)
	PYTHON=$(BIN)/python scripts/generate-keda-stubs.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-artifacts build/site
