# The two commands of the README:  `make repro`  (the pipeline)  and  `make test`  (the test suite).
# Both create .venv from requirements.lock on first use and reuse it afterwards (a stamp file records
# which lock it was built from, so a changed lock reinstalls and an unchanged one costs nothing).
# `make repro CUDA=12` (or CUDA=12 in the environment) installs requirements-cu126.lock instead: the same torch and
# torchvision built for CUDA 12.6, for NVIDIA drivers older than 580 and for V100s (sm_70); `make repro CPU=1`
# installs requirements-cpu.lock: PyTorch's CPU-only build of the same torch, without the 4 GB of CUDA libraries and
# triton, for a machine without an NVIDIA GPU. Switching either way rebuilds .venv.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
FMNIST := /usr/share/datasets/fashion-mnist
ifeq ($(CUDA),12)
LOCK   := requirements-cu126.lock
STAMP  := $(VENV)/.installed-cu126
else ifeq ($(CPU),1)
LOCK   := requirements-cpu.lock
STAMP  := $(VENV)/.installed-cpu
else
LOCK   := requirements.lock
STAMP  := $(VENV)/.installed
endif
#: the stamps of the other locks: a venv built from one of them is rebuilt
OTHER  := $(filter-out $(STAMP),$(VENV)/.installed $(VENV)/.installed-cu126 $(VENV)/.installed-cpu)

.PHONY: repro test test-all release-check lint env system-deps clean-venv bench-gpu device-wheels

# Stage commands call `python`: the venv's, through PATH, so `make repro` needs no activated environment.
# `python -m pipeline repro` is `dvc repro` on every core: the stale stages in parallel (see pipeline/scale/repro.py).
# `make repro PROFILE=<name>` first merges profiles/<name>.yaml into params.yaml (`python -m pipeline profile`), with
# the environment it needs made first: one command from a fresh clone for the paper's recipes and the laptop set.
repro: env system-deps
	$(if $(PROFILE),PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pipeline profile $(PROFILE))
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pipeline check
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pipeline repro

# The suite on every core (pytest-xdist; tests/conftest.py says how the tests are shared out). `make test` skips the
# tests marked slow, each saying why; `make test-all` runs them too (run it before a change to the stages, the
# runner, SLURM or the GPU check lands).
test: env system-deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n logical

test-all: env system-deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n logical --slow

# The release check, before results are published: re-record the reference run here (the stale stages of params.yaml's
# run), save its cells in their committed form (`python -m pipeline cells save`: cells/<profile>/), then what only this
# re-recording can show: the README's blocks are its run's (`readme --check`) and dvc.lock was recorded by this code
# and params (the tests marked release). `make test` checks instead that the committed cells re-derive the README.
release-check: env system-deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pipeline repro
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pipeline cells save
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pipeline readme --check
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n logical --release -m release

# The GPU check (README, "GPUs"; bench/gpu_check.py): a real paper-small cell, eager and compiled; throughput, MFU,
# GPU idle and memory of both data paths at 512 and 64 images per GPU; host syncs per step; the CUDA-only tests. It
# installs nothing and needs no network: the venv's Python where there is one, else the node's own (a stock PyTorch
# image, with the wheels of `make device-wheels` on its PYTHONPATH). Results in $OUT or gpu_check_out/; its row goes
# into bench/throughput.yaml (which `check` reads).
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
bench-gpu:
	$(GPU_PYTHON) bench/gpu_check.py --yaml bench/throughput.yaml

# What a stock PyTorch image (torch, timm, numpy, PyYAML, no network) lacks to read params: pydantic and ruamel.yaml
# (pipeline.schema), at the lock's versions, as wheels for the node's Python (docs/gpus.md, "A stock image"). Carry
# .whl/ there and run `python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl` and
# `export PYTHONPATH=/tmp/site` before any `python -m pipeline` command.
DEVICE_WHEELS := pydantic pydantic_core annotated-types typing-inspection typing_extensions ruamel.yaml
DEVICE_PYTHON ?= 3.12
device-wheels:
	rm -rf .whl && python3 -m pip download --quiet --no-deps --only-binary=:all: --dest .whl \
	  --python-version $(DEVICE_PYTHON) --implementation cp --platform manylinux_2_28_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  $(foreach p,$(DEVICE_WHEELS),$(shell grep -i -m1 '^$(p)==' $(LOCK)))
	@ls .whl

lint: env
	$(BIN)/ruff check .

# uv installs the lock, unpacking and compiling on every core: pip took minutes over torch's 6 GB of CUDA libraries.
# Bytecode is compiled at install, since an environment with PYTHONDONTWRITEBYTECODE would otherwise recompile torch
# in every process. unsafe-best-match lets CUDA=12's PyTorch index and PyPI both serve, as pip does.
UV := uv==0.13.9

env: $(STAMP)

$(STAMP): $(LOCK) pyproject.toml
	@if ls $(OTHER) >/dev/null 2>&1; then echo "rebuilding .venv from $(LOCK)"; rm -rf $(VENV); fi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --disable-pip-version-check $(UV)
	$(BIN)/uv pip install -q --python $(BIN)/python --index-strategy unsafe-best-match --compile-bytecode -r $(LOCK)
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	@touch $(STAMP)

# Debian packages, installed when missing and this machine has apt and root (elsewhere: optional):
# dataset-fashion-mnist, the offline default dataset (without it the fetch stage downloads Fashion-MNIST), and
# poppler-utils, whose pdftoppm renders the report's pages in the tests (they skip that check without it).
system-deps:
	@missing=""; [ -d $(FMNIST) ] || missing="dataset-fashion-mnist"; \
	command -v pdftoppm >/dev/null || missing="$$missing poppler-utils"; \
	if [ -n "$$missing" ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian packages:$$missing"; \
	  (apt-get install -y -qq $$missing >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq $$missing >/dev/null 2>&1)) || \
	  echo "could not install$$missing (optional: see the Makefile)"; \
	fi

clean-venv:
	rm -rf $(VENV)

# The two locks made from requirements.lock, remade whenever it changes (tests/test_locks.py): its pins with torch and
# torchvision as PyTorch's +<build> wheels (from PyTorch's index for <build>), less the packages that build needs not.
# cu126: the CUDA 13 libraries go (torch's metadata pins the CUDA 12.6 ones); cpu: every CUDA library and triton go
# (torch's compiler uses its C++ backend on CPU).
requirements-cu126.lock: ABOUT = The CUDA 12.6 build of requirements.lock's stack, for NVIDIA drivers >= 525 and \
  V100 (sm_70) GPUs, which its CUDA 13 wheels cannot use (driver >= 580, no sm_70 kernels): \`make repro CUDA=12\`.
requirements-cu126.lock: DROP = ^(cuda-bindings|cuda-pathfinder|cuda-toolkit|nvidia-(cu|nccl|nvjit|nvshmem|nvtx|cufile))
requirements-cpu.lock: ABOUT = The CPU-only build of requirements.lock's stack, for a machine without an NVIDIA GPU, \
  4 GB less to install (no CUDA libraries, no triton): \`make repro CPU=1\`.
requirements-cpu.lock: DROP = ^(cuda-bindings|cuda-pathfinder|cuda-toolkit|nvidia-(cu|nccl|nvjit|nvshmem|nvtx|cufile)|triton==)
requirements-%.lock: requirements.lock
	@{ echo "# $(ABOUT)" | fold -s -w 116 | sed -e 's/ *$$//' -e '2,$$s/^/# /'; \
	   echo "# Made by \`make $@\` (see the Makefile); do not edit."; \
	   echo "--extra-index-url https://download.pytorch.org/whl/$*"; \
	   grep -vE '$(DROP)' requirements.lock | sed -E 's/^(torch|torchvision)==([0-9.]+)$$/\1==\2+$*/'; } > $@
