#!/usr/bin/env bash
# The GPU image's Python packages on this CPU, to catch what a version difference breaks before the GPU window does:
# builds .venv-gpu-image/ (ignored by git; about 6 GB, most of it torch's CUDA libraries) with the image's releases
# where the registry has them, and nothing the image lacks (plotly, fastapi, uvicorn, openai are not installed),
# then runs the suite's dry run in it with plotly unimportable.
#
#   bash scripts/gpu-image-twin.sh              build (once) and run the dry run
#   bash scripts/gpu-image-twin.sh pytest ARGS  run tests in the twin instead (the GPU paths that run on a CPU)
#
# The releases are the image's pip list in the device tool's KINDS.md (2026-11). Not matched here: the image's
# Python is 3.12 (this one is 3.11), and its jax 0.11.2 and numpy 2.5.2 are newer than the registry's (the newest is
# taken). The wheels the suite carries to the image (scripts/gpu-wheels.txt) are installed as the image would have them.
set -euo pipefail
cd "$(dirname "$0")/.."
TWIN=${GPU_IMAGE_TWIN:-.venv-gpu-image}
IMAGE=(torch==2.11.0 transformers==5.17.0 huggingface-hub==1.33.0 tokenizers==0.23.2 safetensors==0.8.0 onnx==1.23.1
       onnxruntime==1.30.0 jax jaxlib flatbuffers ml-dtypes typer rich jinja2 psutil nvidia-ml-py ninja httpx pytest
       hypothesis absl-py h5py protobuf requests pyyaml tqdm sentencepiece regex)
CARRIED=$(grep -v '^#' scripts/gpu-wheels.txt)
# shellcheck disable=SC2086  # CARRIED is a list of requirements
if [[ "$(cat "$TWIN/.complete" 2>/dev/null)" != "${IMAGE[*]} $CARRIED" ]]; then  # a cut install, or new lists: resumed
  python3 -m venv "$TWIN"
  "$TWIN/bin/python" -m pip install -q "${IMAGE[@]}"
  "$TWIN/bin/python" -m pip install -q --no-deps $CARRIED  # as the suite installs them on the image
  echo "${IMAGE[*]} $CARRIED" >"$TWIN/.complete"
fi
blocked=$(mktemp -d)
trap 'rm -rf "$blocked"' EXIT
mkdir "$blocked/plotly"
echo "raise ImportError('plotly is not on the GPU image')" >"$blocked/plotly/__init__.py"
export PYTHONPATH=$blocked:$PWD
if [[ ${1:-} == pytest ]]; then
  shift
  exec "$TWIN/bin/python" -m pytest -p no:cacheprovider "$@"
fi
OUT=${OUT:-out/gpu-image-twin} PYTHON=$TWIN/bin/python bash scripts/gpu-suite.sh --dry-run
