# Two commands for a newcomer: `make demo` and `make test` (both set up first).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# Pinned build-time tools for fairseq-fixed's Cython/C++ extensions. numpy < 2:
# fairseq 0.12 still uses np.compat.long (TokenBlockDataset, LanguagePairDataset).
BUILD_TOOLS := cython==3.3.1 numpy==1.26.4 setuptools==84.2.1 wheel==0.48.0
STAMP := $(VENV)/.setup-done
# Where pip looks for torch. Empty: pip's own configuration (on this project's
# development machine a local CPU wheel). On Linux, PyPI's torch is the CUDA
# build (several GB): point this at a CPU wheel index instead, e.g.
#   make setup TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=
# The optional parts `make setup` installs (setup.py's extras); e.g. EXTRAS=test for a lighter setup
# without the architecture search, spaCy and matplotlib.
EXTRAS ?= search,syntax,analysis,tensorboard,test

.PHONY: setup demo test bench bench-speed bench-decode bench-quality clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-docs.txt constraints.txt setup.py Makefile tools/check_build_prereqs.py
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Python 3.11 is required; set PYTHON=...)"; exit 1; }
	@# fairseq-fixed is built from source below: check the compilers and Python headers
	@# before anything is downloaded (skipped once fairseq is installed).
	@$(PY) -c "import fairseq" 2>/dev/null || $(PYTHON) tools/check_build_prereqs.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) torch==2.13.0
	$(PIP) install -q -c constraints.txt $(BUILD_TOOLS)
	# fairseq-fixed: the PyPI fairseq 0.12.2 does not import on Python 3.11.
	# --no-deps: its metadata asks for torchaudio, which would bring a CUDA torch.
	$(PY) -c "import fairseq" 2>/dev/null || $(PIP) install -q --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
	# the package with its declared requirements and extras (setup.py), at requirements.txt's versions
	# (also of what they pull in); constraints.txt keeps torch and numpy where they are
	$(PIP) install -q -c constraints.txt -c requirements.txt --no-build-isolation -e ".[$(EXTRAS)]"
	# the documentation site (mkdocs.yml), which tests/docs/test_site.py builds
	$(PIP) install -q -c constraints.txt -r requirements-docs.txt
	$(PY) -c "import torch, fairseq, fairseq_plugins; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

demo: setup
	$(PY) -m fairseq_plugins.cli.demo

# Test files run side by side, one per worker (pytest-xdist; a file's tests share
# their module fixtures, so a file stays on one worker), each on one thread
# (tests/conftest.py), the longest files first (tests/durations.json, written by
# tools/record_test_durations.py; --no-loadscope-reorder keeps that order).
# TEST_WORKERS=0 runs them one after another in pytest's own process; TEST_ARGS
# adds pytest options (e.g. --junitxml=FILE for the durations tool). The Python processes
# the tests start go through a fork server with torch and fairseq imported
# (tests/fork_server.py); TEST_FORK_SERVER=0 starts fresh interpreters instead.
TEST_WORKERS ?= auto
TEST_ARGS ?=

test: setup
	# Triton for the tests only: its interpreter runs cosFormer's fused kernels on the CPU
	$(PIP) install -q --no-deps -r requirements-test-triton.txt
	# --durations: the slowest tests, to keep the suite within its time budget
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 $(TEST_ARGS) tests

# Benchmarks (never part of `make test`). BENCH_ARGS=--quick for a smoke run of minutes.
# bench-speed: one attention layer of every kind, time and memory vs T -> docs/records/benchmarks.md (+ PNG plot)
# bench-quality: every kind trained on the shared real data -> docs/records/results.md (hours on 2 CPU cores; resumable)
# bench-decode: beam search and LM sampling throughput -> docs/records/decode_speed.md (reuses bench-quality's models)
bench: bench-speed

bench-speed: setup
	$(PY) benchmarks/attention_speed.py $(if $(filter --quick,$(BENCH_ARGS)),,--output docs/records/benchmarks.md) $(BENCH_ARGS)

bench-quality: setup
	$(PY) benchmarks/quality.py $(BENCH_ARGS)

bench-decode: setup
	$(PY) benchmarks/decode_speed.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) *.egg-info
