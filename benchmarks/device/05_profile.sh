#!/usr/bin/env bash
# Device session A of 2026-12-01 (3rd): no target needed, so one call. Where a training step's time goes
# (the trainer on a random SmolLM2-shaped target: fp32 vs bf16 target pass, batches grouped by length,
# torch.profiler tables), the kernel with its new launch choice vs the old 128-slot/4-warp one, the
# drafter forward with each step captured as one CUDA graph, and the flex-attention gradient test on
# CUDA with its whole log (it failed for P-EAGLE on 2026-12-01 with the numbers lost).
# Carry: nothing.
set -uxo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
timeout 240 python benchmarks/bench_train_step.py --json "$OUT/train_step_h200.json" > "$OUT/train_step.log" 2>&1
grep '^{' "$OUT/train_step.log"; echo "train-step bench done at ${SECONDS} s"
timeout 90 python benchmarks/bench_kernel.py --json "$OUT/kernel_h200.json" 2>&1 | tail -n 8
echo "kernel bench done at ${SECONDS} s"
timeout 150 python benchmarks/bench_drafter_forward.py --compile cudagraph --json "$OUT/drafter_forward_cudagraph_h200.json" 2>&1 | tail -n 9
echo "forward bench done at ${SECONDS} s"
timeout 100 python -m pytest -q -p no:cacheprovider tests/test_partition.py -k "cuda or flex" > "$OUT/flex_cuda_tests.log" 2>&1
tail -n 30 "$OUT/flex_cuda_tests.log"
echo "all done at ${SECONDS} s"
