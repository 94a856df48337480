# The two commands of the README:  `make repro`  (the pipeline)  and  `make test`  (the test suite).
# Both create .venv from requirements.lock on first use and reuse it afterwards (a stamp file records
# which lock it was built from, so a changed lock reinstalls and an unchanged one costs nothing).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
FMNIST := /usr/share/datasets/fashion-mnist

.PHONY: repro test lint env data-mirror clean-venv

repro: env data-mirror
	$(BIN)/dvc repro

test: env data-mirror
	$(BIN)/python -m pytest

lint: env
	$(BIN)/ruff check .

env: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

# Fashion-MNIST, the offline default, from Debian's package when this machine can install it; elsewhere the
# fetch stage downloads it from its canonical source.
data-mirror:
	@if [ ! -d $(FMNIST) ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian's dataset-fashion-mnist into $(FMNIST)"; \
	  (apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1)) || \
	  echo "could not install dataset-fashion-mnist; the fetch stage will download Fashion-MNIST instead"; \
	fi

clean-venv:
	rm -rf $(VENV)
