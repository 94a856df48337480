# The two commands of the README:  `make repro`  (the pipeline)  and  `make test`  (the test suite).
# Both create .venv from requirements.lock on first use and reuse it afterwards (a stamp file records
# which lock it was built from, so a changed lock reinstalls and an unchanged one costs nothing).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
FMNIST := /usr/share/datasets/fashion-mnist

.PHONY: repro test lint env system-deps clean-venv

# Stage commands call `python`: the venv's, through PATH, so `make repro` needs no activated environment.
# `python -m pipeline repro` is `dvc repro` on every core: the stale stages in parallel (see pipeline/scale/repro.py).
repro: env system-deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pipeline check
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pipeline repro

test: env system-deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest

lint: env
	$(BIN)/ruff check .

env: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install -qq --disable-pip-version-check --no-deps --no-build-isolation -e .
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
