#!/usr/bin/env bash
# Device call 2 of 4: park the second third of the GGUF; meanwhile the drafter-forward benchmark at
# gpt-oss-20b size (needs no target). Carry: parts/gguf.part-01
set -uxo pipefail
cp parts/gguf.part-01 /tmp/pk/
export PYTHONPATH=. PYTHONUNBUFFERED=1
if [ -f benchmarks/bench_drafter_forward.py ]; then
  timeout 400 python benchmarks/bench_drafter_forward.py --json "$OUT/drafter_forward_h200.json"
fi
