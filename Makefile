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

.PHONY: setup lock system-deps report plateau-check test test-slow lint bench clean

# The pinned lock (every package, --no-deps: the exact versions the docs were measured with;
# `make lock` regenerates it from pyproject.toml); triton only where a GPU is (~0.9 GB). The
# packages are byte-compiled at install on purpose: where PYTHONDONTWRITEBYTECODE is set (this
# machine's shells), a venv without .pyc files recompiles torch's 2,600 modules in every process
# (~5 s each). compileall does it on every core after pip installs without (pip compiles on one:
# 67 s against 36 + 19 s on the 2-core reference, 2026-11-27); a file it cannot compile (a test
# data file, another Python's syntax) is skipped, as pip skips it.
# A failed install removes the half-built environment and says how much disk there was.
# What no lpdt process imports is left out of that (it would be compiled on import if it ever
# were): the packages' own test suites, pip, and transformers' models other than the BERT family
# (2,544 files; lpdt builds BERT and DistilBERT through the auto classes): 30 -> 20 s on the
# 2-core VM, 2026-11-28.
NOT_IMPORTED := /tests/|/site-packages/pip/|/transformers/models/(?!(auto|bert|distilbert|encoder_decoder)/)
LOCK := requirements/lock.txt
# The lock is installed by two pips at once, NVIDIA's and CUDA's libraries (3.3 GB) beside the
# rest: one pip unpacks on one core. The whole environment (`make .venv/bin/lpdt` in a fresh
# clone) in 52.1 / 54.6 s against 76.6 / 76.9 s with one pip, in turns on the 2-core VM,
# 2026-11-28 (docs/notebook/2026-11-28-make-test-six-minutes.md). With --no-deps
# neither waits for the other, and pip checks no package's requirements against the other half.
LOCK_SPLIT := ^(nvidia-|cuda-)
PIP_LOCK = $(BIN)/pip install --quiet --no-compile --no-deps
$(BIN)/lpdt: pyproject.toml $(LOCK) requirements/gpu.txt
	@command -v $(PY) >/dev/null || { echo "error: $(PY) not found (Python 3.11 is required)"; exit 1; }
	@rm -rf $(VENV)
	$(PY) -m venv $(VENV)
	@{ $(BIN)/pip install --quiet --upgrade pip \
	  && grep -E '$(LOCK_SPLIT)' $(LOCK) > $(VENV)/lock-cuda.txt \
	  && grep -vE '$(LOCK_SPLIT)' $(LOCK) > $(VENV)/lock-rest.txt \
	  && { $(PIP_LOCK) -r $(VENV)/lock-cuda.txt & cuda=$$!; \
	       $(PIP_LOCK) -r $(VENV)/lock-rest.txt; rest=$$?; wait $$cuda && [ $$rest = 0 ]; } \
	  && { $(BIN)/python -m compileall -q -j 0 -x '$(NOT_IMPORTED)' $(VENV)/lib >/dev/null || true; } \
	  && $(BIN)/pip install --quiet --no-deps --no-build-isolation -e . \
	  && if nvidia-smi -L >/dev/null 2>&1; then \
	       $(BIN)/pip install --quiet --no-deps -r requirements/gpu.txt; fi; } \
	  || { echo "error: installing the pinned packages into $(VENV) failed (pip says why above; the install needs about" \
	         "6 GB of disk, mostly torch's CUDA build; free now:"; df -h . | tail -1; \
	       rm -rf $(VENV); exit 1; }
	@touch $@

## lock: re-pin requirements/lock.txt + gpu.txt from pyproject.toml (resolves, installs nothing)
lock:
	rm -rf /tmp/lpdt-lock-venv && $(PY) -m venv /tmp/lpdt-lock-venv
	/tmp/lpdt-lock-venv/bin/pip install --quiet --upgrade pip
	/tmp/lpdt-lock-venv/bin/pip install --quiet --dry-run --ignore-installed \
	  --report /tmp/lpdt-lock-report.json -e '.[dev]'
	$(PY) tools/write_lock.py /tmp/lpdt-lock-report.json requirements
	rm -rf /tmp/lpdt-lock-venv /tmp/lpdt-lock-report.json

## system-deps: Debian data packages the offline quick scale reads (Fashion-MNIST, fortunes) and
## poppler-utils for the report checks
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
	@mkdir -p results/logs
	@$(BIN)/snakemake plan --cores 1 --quiet all --config scale=$(SCALE) > results/logs/plan.log \
	  2>&1 || { tail -n 20 results/logs/plan.log; exit 1; }
	@sed -n '/^scale /,/^per-run/p' results/logs/plan.log
	$(BIN)/snakemake --cores all --config scale=$(SCALE)

## plateau-check: train each claim cell's first seed for twice its epochs, write
## results/plateau_check.csv, and rerun the report on it (docs/quick-scale.md, "Plateau check")
plateau-check: setup
	$(BIN)/snakemake --cores all plateau_check --config scale=$(SCALE)
	$(BIN)/snakemake --cores all --forcerun report --config scale=$(SCALE)

## test: set up, then the linter, the formatter's check, the type checker (mypy over src/, its
## settings in pyproject.toml; one worker per core: with a fresh clone's empty cache 36 s instead
## of 46 s on the 2-core VM, 2026-11-28; about 19 s since it no longer follows transformers) and
## the default test suite (slow tests excluded); the 15 slowest
## tests are listed at the end (--durations), so what makes the suite slow is on record in every
## CI log. src/ is byte-compiled first (0.2 s), as the environment is at install: where
## PYTHONDONTWRITEBYTECODE is set, each of the suite's ~100 Python subprocesses would otherwise
## compile the lpdt modules it imports (about 0.2 s each). mypy beside pytest at nice 19 was
## tried and taken back: pytest took longer by what mypy had saved (fresh clones, 2026-11-28,
## docs/notebook/2026-11-28-make-test-six-minutes.md).
test: setup
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools
	$(BIN)/mypy --num-workers auto
	$(BIN)/python -m compileall -q -j 0 src >/dev/null
	$(BIN)/pytest -q -n 2 --durations=15

## test-slow: the slow tests only
test-slow: setup
	$(BIN)/python -m compileall -q -j 0 src >/dev/null
	$(BIN)/pytest -q -m slow

## bench: engine overhead, fp32 and 8-bit steps eager vs compiled (benchmarks/; docs/engine.md, "Benchmarks")
bench: setup
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_compile.py --cases resnet20:8

clean:
	rm -rf results reports .snakemake
