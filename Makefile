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
# llama.cpp and torch wait through OpenMP: sleeping, not spinning, keeps a shared 2-core machine usable
export OMP_WAIT_POLICY := PASSIVE
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# llama-cpp-python is an sdist, built once into .wheels/ (git-ignored) for a portable x86-64 target
# (AVX2, no AVX512/AMX): a -march=native build crashed at the first decode on these VMs, and CI machines
# may have other CPUs. LLAVA_BUILD=OFF: the multimodal library (mtmd / clip, imported only by llava chat
# handlers kgrag never uses) is not compiled. Both cores build it (about 8 minutes).
LLAMA_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
	-DLLAVA_BUILD=OFF
LLAMA_WHEEL := .wheels/llama-$(LLAMA_VERSION).built

.PHONY: install repro test test-fast bench train clean help

help:
	@echo "make repro   set up if needed, then run the default experiment (dvc repro)"
	@echo "make test    set up if needed, then run the whole test suite"
	@echo "make bench   run the benchmarks (writes reports/bench/*.json)"
	@echo "make train   train a G-Retriever preset: make train DATASET=explagraphs PRESET=g_retriever"

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip wheel setuptools

$(LLAMA_WHEEL): | $(VENV)/bin/python
	mkdir -p .wheels
	CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(VENV)/bin/python -m pip wheel --quiet --no-deps \
		--no-cache-dir llama-cpp-python==$(LLAMA_VERSION) -w .wheels
	touch $@

$(STAMP): $(LLAMA_WHEEL) | $(VENV)/bin/python
	# torch first and pinned: the CPU wheel on disk (an unpinned torch pulls GBs of CUDA packages).
	$(VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VENV)/bin/python -m pip install --quiet --force-reinstall --no-deps .wheels/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(VENV)/bin/python -m pip install --quiet -e ".[dev,server,train]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Debian's chromium for the browser tests (tests/test_report_browser.py: Playwright drives it; no browser download)
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| { if [ -n "$$CI" ] && [ "$$CI" != "false" ]; then \
			echo "error: could not apt-get install chromium, which CI's browser tests need (CI=$$CI)"; exit 1; \
		else echo "warning: could not apt-get install chromium (not root?): the browser tests will be skipped"; fi; }

install: $(STAMP)

repro: install
	dvc repro

test: install $(CHROMIUM)
	pytest -q --durations=20

test-fast: install
	pytest -q -m "not e2e"

bench: install
	dvc repro retrieve
	python bench/retrieve.py
	python bench/lego.py
	python bench/constrain.py
	python bench/reasoners.py
	python bench/scale.py
	python bench/retrieval_frontier.py
	python bench/inference.py
	python bench/linking.py --split test --questions 500
	dvc repro relplan index
	python bench/generalize.py --split test --per-hop 100 --config default= --config oracle='retrieve.oracle_hops=true'

# G-Retriever training is its own pipeline (gretriever/dvc.yaml), never run by `make repro`.
DATASET ?= explagraphs
PRESET ?= g_retriever
train: install
	dvc repro gretriever/dvc.yaml:train-$(DATASET)@$(PRESET)
	python -m stages.gretriever_table

clean:
	rm -rf data .kgrag_cache
