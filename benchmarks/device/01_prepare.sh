#!/usr/bin/env bash
# Device call 1 of 4 (H200 via the `device` tool): park the first third of the target's GGUF,
# install the wheels the GPU image lacks, then the GPU-only measurements that need no target:
# flex-attention gradients == dense on CUDA, the kernel benchmark, the 8B training-memory benchmark.
# Carry: parts/gguf.part-00 parts/wheels
set -uxo pipefail
mkdir -p /tmp/pk && cp parts/gguf.part-00 /tmp/pk/
python -m pip install -q --no-deps parts/wheels/*.whl   # the python that runs the code (plain pip is another one there)
nvidia-smi --query-gpu=name,memory.total --format=csv
export PYTHONPATH=. PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider tests/test_partition.py -k "cuda or flex" 2>&1 | tee "$OUT/flex_cuda_tests.log"
timeout 120 python benchmarks/bench_kernel.py --json "$OUT/kernel_h200.json"
timeout 330 python benchmarks/bench_train_memory.py --json "$OUT/train_memory_h200.json" 2>&1 | tail -n 40
