# The README's commands call these targets. `make setup` builds .venv with every stack that runs on a CPU.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BENCH := $(PY) -m harness.cli

.PHONY: setup demo test site browser gate baseline gpu clean

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

# The CI regression gate (.ci/gate): GATE_RUNNERS on qwen2-tiny (synthetic weights, f32, CPU, the `gate` profile),
# checked against the committed CPU baseline by each row's ratio to transformers (`check --gate`, thresholds in
# harness/check.py GATE_THRESHOLDS); a try that fails is repeated, up to GATE_TRIES, and the better of the tries so far
# counts. Rows the baseline lacks are reported as new, not judged: after adding a runner here, run `make baseline`
# (on a quiet machine: it keeps the better of BASELINE_SUITES suites) and commit GATE_BASELINE.
GATE_RUNNERS := transformers transformers-compiled linnet-torch linnet-inductor linnet-jax linnet-ort-f32
GATE_TRIES ?= 8
BASELINE_SUITES ?= 5
GATE_BASELINE := .ci/baseline/qwen2-tiny.json

gate: setup
	BENCH="$(BENCH)" .ci/gate check $(GATE_BASELINE) $(GATE_TRIES) $(GATE_RUNNERS)

baseline: setup
	BENCH="$(BENCH)" .ci/gate baseline $(GATE_BASELINE) $(BASELINE_SUITES) $(GATE_RUNNERS)

# On a lent GPU machine: the one-shot suite (see scripts/gpu-suite.sh).
gpu:
	bash scripts/gpu-suite.sh

clean:
	rm -rf site .pytest_cache
