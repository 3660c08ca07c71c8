# The README's commands call these targets. `make setup` builds .venv with every stack that runs on a CPU.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BENCH := $(PY) -m harness.cli

.PHONY: setup demo test site browser gate gate-power gpu clean

setup: $(VENV)/.installed

# llama-cpp-python builds from source (its wheels are not on PyPI); its multimodal library (mtmd), which no row loads,
# is a fifth of that build's time.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	CMAKE_ARGS="-DLLAVA_BUILD=OFF $${CMAKE_ARGS:-}" $(PY) -m pip install --quiet -e ".[all-cpu]"
	touch $@

# The main job on the embedded default: qwen2-tiny, synthetic weights, CPU; then the site.
demo: setup
	$(BENCH) run qwen2-tiny
	$(MAKE) site

site: setup
	$(BENCH) site --results results --out site

# One process: on two pytest-xdist workers (2 cores) the suite took 20 minutes against 22-25, and three tests that
# count a thread's sleeps or time a duet failed beside the other worker's load.
test: setup browser
	$(PY) -m pytest

# Headless Chromium for the site's browser test (Debian's package; needs root or sudo).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

# The CI regression gate (.ci/gate): the baseline commit (GATE_BASE, default HEAD's first parent) in a git worktree
# against this checkout on GATE_RUNNERS (qwen2-tiny, synthetic weights, f32, CPU, the `gate` profile). Fails at once on
# a wrong answer; then times both sides in lock-step turns (`linnet-bench duet`: process pairs of GATE_SECONDS of turns,
# GATE_PAIRS per row at least and more while a row has taken under GATE_ROW_SECONDS) and fails when a row's 95%
# interval of candidate/baseline lies wholly beyond a 5% slowdown (harness/check.py GATE_THRESHOLDS). About 9 minutes
# on a 2-core machine.
# `make gate-power` measures how often it catches a planted 15% slowdown and passes unchanged code.
GATE_RUNNERS := transformers transformers-compiled linnet-torch linnet-inductor linnet-jax linnet-ort-f32
GATE_PAIRS ?= 2
GATE_SECONDS ?= 6
GATE_ROW_SECONDS ?= 45
GATE_BASE ?= HEAD^1

gate: setup
	GATE_BASE="$(GATE_BASE)" PY="$(abspath $(PY))" .ci/gate $(GATE_PAIRS) $(GATE_SECONDS) $(GATE_ROW_SECONDS) $(GATE_RUNNERS)

gate-power: setup
	PY="$(abspath $(PY))" scripts/gate-power.sh $(GATE_PAIRS) $(GATE_SECONDS) $(GATE_ROW_SECONDS) $(GATE_RUNNERS)

# On a lent GPU machine: the one-shot suite (see scripts/gpu-suite.sh).
gpu:
	bash scripts/gpu-suite.sh

clean:
	rm -rf site .pytest_cache
