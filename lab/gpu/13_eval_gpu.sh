#!/usr/bin/env bash
# `peagle-lab eval` on a GPU: the replay evaluation's oracle test on CUDA (evaluate_drafters == the engine, per
# drafter and per category; $OUT/gpu_eval_tests.log), then the shipped pair on 40 MT-Bench prompts spread over the
# set (every category) at K=7 with the target and the drafters on the GPU ($OUT/eval_h200_mtbench40.json).
# Run after 06_park.sh has parked parts/gguf.part-00 and -01; this command carries parts/gguf.part-02 (parts/wheels
# parked by 06_park.sh):   bash lab/gpu/13_eval_gpu.sh
set -uxo pipefail
export PEAGLE_GGUF=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-/tmp/pk/cache} PYTHONPATH=. PYTHONUNBUFFERED=1
bash lab/gpu/install_wheels.sh
bash lab/gpu/join_gguf.sh || exit 1
python -c "from peagle_lab.assets import resolve_target; print(resolve_target(None))" 2>&1 | tail -n 1
PEAGLE_TEST_DEVICE=cuda timeout 120 python -m pytest -q -p no:cacheprovider tests/test_replay.py > "$OUT/gpu_eval_tests.log" 2>&1
tail -n 5 "$OUT/gpu_eval_tests.log"
echo "tests done at ${SECONDS} s"
timeout 240 python -m peagle_lab eval peagle-smollm2 eagle-smollm2 --num-prompts 40 --spread --k 7 --device cuda \
  --json "$OUT/eval_h200_mtbench40.json" > "$OUT/eval_h200.log" 2>&1
grep -av "Loading weights\|greedy replies" "$OUT/eval_h200.log" | tail -n 12
echo "done at ${SECONDS} s"
