# Two commands on a fresh clone: `make demo` and `make test`. Each builds .venv first if needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/pip install -qq --disable-pip-version-check
# pytest workers; notebooks and tests run in parallel on CI's 2 cores
WORKERS ?= 2

.PHONY: demo test venv sync outputs bench lock docs docs-test peers compat compat-min compat-pinned compat-nojit compat-absent

# torch's default build brings CUDA and its libraries (about 3 GB to download); on a machine without an NVIDIA GPU,
# `make demo TORCH=cpu` builds .venv with torch's CPU build instead (about 0.2 GB)
TORCH ?= cuda
TORCH_INDEX := $(if $(filter cpu,$(TORCH)),--index-url https://download.pytorch.org/whl/cpu)

$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) $(TORCH_INDEX) torch==2.14.1 torchvision==0.29.1
	$(PIP) -c requirements.lock -e ".[dev,ray]"
	@touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/fastrl-replay train

# notebooks are clean, the library matches a fresh export, README matches index.ipynb; then every test
test: $(STAMP)
	$(BIN)/python tools/nbsync.py
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup -p no:cacheprovider

sync: $(STAMP)
	$(BIN)/python tools/nbsync.py --fix

# re-run every notebook in a fresh kernel and store its outputs (the documentation shows them)
outputs: $(STAMP)
	PYTHONWARNINGS='ignore:`torch.jit.script` is deprecated:FutureWarning' $(BIN)/nbdev-test nbs --save
	$(BIN)/python tools/nbsync.py --fix

# Tianshou 2.0.1 declares pandas < 3 although its replay buffers work with the pandas fastai uses here, so it is
# installed without its declared requirements, and the ones its imports need are installed by name
bench: $(STAMP)
	$(PIP) -c requirements.lock -e ".[dev,bench,ray]"
	$(PIP) --no-deps tianshou==2.0.1
	$(PIP) -c requirements.lock sensai-utils deepdiff overrides h5py pettingzoo tensorboard virtualenv 2>/dev/null
	$(BIN)/python bench/replay_bench.py
	$(BIN)/python bench/per_bench.py

# the peers' own test suites (tests/peers/, vendored with their licences and commits) against the adapters; no network at test time.
# `make test` runs them too, but for Dopamine's; the tests that still fail are expected failures, listed with their reasons in tests/peers/conftest.py.
# Dopamine's tests are TensorFlow test cases: TensorFlow (the `dopamine` extra, 1.4 GB, pinning h5py below the datasets' h5py) is installed
# apart into $(PEERS_TF) with the packages its import needs that the environment lacks, and is on the path of their run only
PEERS_TF := .peers-tf
$(PEERS_TF)/.installed:
	$(BIN)/pip install -qq --disable-pip-version-check --no-deps --target $(PEERS_TF) tensorflow-cpu==2.21.0 flatbuffers==25.12.19 gast==0.7.0 \
		google-pasta==0.2.0 ml_dtypes==0.6.0 opt_einsum==3.4.0 termcolor==3.3.0 keras==3.15.1 namex==0.1.0 optree==0.20.0 h5py==3.14.0
	@touch $@

peers: $(STAMP) $(PEERS_TF)/.installed
	$(BIN)/python -m pytest -n $(WORKERS) -p no:cacheprovider -m peers -rxs tests/peers
	PYTHONPATH=$(PEERS_TF) TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m pytest -p no:xdist -p no:cacheprovider -m peers -rxs tests/peers/dopamine

# the documentation site, from the notebooks and their stored outputs, into docs/_site (offline)
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(PIP) -c requirements.lock -e ".[dev,docs]"
	@touch $@

docs: $(DOCS_STAMP)
	$(BIN)/python tools/docs_site.py

# builds the site and checks every page in headless Chromium: Debian's, installed with apt-get when it is missing
docs-test: $(DOCS_STAMP)
	@test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium)
	$(BIN)/python -m pytest -p no:cacheprovider -m docs tests/test_docs_site.py

# the supported versions, tested: the core memory, sampler, checkpoint and callback tests on the lowest torch, NumPy,
# numba and fastai that pyproject.toml admits (requirements-min.lock, in .venv-min) and on the pinned ones; the memory's
# tests with numba's JIT off (its kernels run as Python, indices checked); checkpoints with isal absent (zlib's CRC-32).
# `make -k compat` runs every variant whatever one of them finds
MIN_VENV := .venv-min
MIN_STAMP := $(MIN_VENV)/.installed
COMPAT_TESTS := tests/test_replay_core.py tests/test_storage_sampler_pairs.py tests/test_callback.py \
	tests/test_prioritized.py tests/test_sumtree.py tests/test_persist.py tests/test_frames_compressed.py
NOJIT_TESTS := tests/test_sumtree.py tests/test_prioritized.py tests/test_replay_core.py tests/test_callback.py \
	tests/test_storage_sampler_pairs.py tests/test_frames_compressed.py
ABSENT_TESTS := tests/test_persist.py
COMPAT_PYTEST := -m pytest -n $(WORKERS) --dist loadgroup --max-worker-restart 0 -p no:cacheprovider
# each test process may address 16 GiB: a runaway allocation fails as a MemoryError, not by the OOM killer's hand
MEM_CAP := ulimit -v 16777216 &&

$(MIN_STAMP): pyproject.toml requirements-min.lock
	@test -x $(MIN_VENV)/bin/python || $(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/pip install -qq --disable-pip-version-check --no-deps -r requirements-min.lock
	$(MIN_VENV)/bin/pip install -qq --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

compat: compat-min compat-pinned compat-nojit compat-absent

compat-min: $(MIN_STAMP)
	$(MEM_CAP) $(MIN_VENV)/bin/python $(COMPAT_PYTEST) $(COMPAT_TESTS)

compat-pinned: $(STAMP)
	$(MEM_CAP) $(BIN)/python $(COMPAT_PYTEST) $(COMPAT_TESTS)

compat-nojit: $(STAMP)
	$(MEM_CAP) NUMBA_DISABLE_JIT=1 $(BIN)/python $(COMPAT_PYTEST) $(NOJIT_TESTS)

compat-absent: $(STAMP)
	$(MEM_CAP) FASTRL_REPLAY_ABSENT=isal $(BIN)/python $(COMPAT_PYTEST) $(ABSENT_TESTS)

# refresh the pins from the current environment
lock:
	$(BIN)/pip freeze --exclude-editable | grep -v '^fastrl-replay' > requirements.lock
