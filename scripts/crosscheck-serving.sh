#!/usr/bin/env bash
# Cross-checks linnet.serve's serving numbers with an independent load generator (guidellm) and the harness's own
# serving client against one `linnet serve` on the same configuration, printed side by side.
#   scripts/crosscheck-serving.sh                                  # qwen2-tiny, torch, the default workload (~3 min)
#   scripts/crosscheck-serving.sh --workload cpu --backend ort --out results/crosscheck/x.json
# Needs the crosscheck extra (pip install 'linnet[crosscheck]', i.e. guidellm) besides the serve extra.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
"$PYTHON" -c 'import guidellm' 2>/dev/null || { echo "guidellm is not installed: pip install 'linnet[crosscheck]'" >&2; exit 2; }
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" scripts/crosscheck_serving.py "$@"
