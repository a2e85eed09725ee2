# kgrag: `make repro` runs the default experiment, `make test` the test suite. Both set up on first use.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha256sum | cut -c1-12)

# Telemetry off, model hubs offline, all state inside the repo.
export DO_NOT_TRACK := 1
export DVC_NO_ANALYTICS := 1
export GX_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# llama-cpp-python is an sdist: let its build use both cores.
export CMAKE_BUILD_PARALLEL_LEVEL := 2

.PHONY: install repro test test-fast bench clean help

help:
	@echo "make repro   set up if needed, then run the default experiment (dvc repro)"
	@echo "make test    set up if needed, then run the whole test suite"
	@echo "make bench   run the benchmarks (writes reports/bench/*.json)"

$(STAMP):
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip wheel setuptools
	# torch first and pinned: the CPU wheel on disk (an unpinned torch pulls GBs of CUDA packages).
	$(VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VENV)/bin/python -m pip install --quiet -e ".[dev,server]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

repro: install
	dvc repro

test: install
	pytest -q

test-fast: install
	pytest -q -m "not e2e"

bench: install
	python bench/retrieve.py

clean:
	rm -rf data .kgrag_cache
