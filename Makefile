# The README's commands call these targets. `make setup` builds .venv with every stack that runs on a CPU.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BENCH := $(PY) -m harness.cli

.PHONY: setup demo test site browser gpu clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[all-cpu]"
	touch $@

# The main job on the embedded default: qwen2-tiny, synthetic weights, CPU; then the site.
demo: setup
	$(BENCH) run qwen2-tiny
	$(MAKE) site

site: setup
	$(BENCH) site --results results --out site

test: setup browser
	$(PY) -m pytest

# Headless Chromium for the site's browser test (Debian's package; needs root or sudo).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

# On a lent GPU machine: the one-shot suite (see scripts/gpu-suite.sh).
gpu:
	bash scripts/gpu-suite.sh

clean:
	rm -rf site .pytest_cache
