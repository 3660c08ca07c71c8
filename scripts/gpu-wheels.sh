#!/usr/bin/env bash
# Downloads (here, where pip reaches the registry) the wheels the lent H200 lacks for the GPU suite, into .whl/
# (ignored by git; carried to the device with `carry: [".whl"]`, well under its 64 MiB). The H200's image runs Python
# 3.12 and has torch, JAX, ONNX Runtime, transformers, typer, rich, psutil, safetensors and nvidia-ml-py; not pydantic.
# `linnet-bench run` imports neither the site nor plotly (tests/test_gpu_suite.py), so no plotly is carried.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
for spec in $(grep -v '^#' scripts/gpu-wheels.txt); do
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl "$spec"
done
ls -l .whl
du -sh .whl
