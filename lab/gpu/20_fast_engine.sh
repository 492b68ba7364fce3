#!/usr/bin/env bash
# The fast engine (static caches, CUDA graphs) on one GPU, from the repository root, in <= 420 s:
#   1. tests/test_fast_engine.py on CUDA (graph replay == eager, greedy == AR, logits == transformers);
#   2. `bench --engine fast`: AR, EAGLE-3 and P-EAGLE K in $KS with the shipped drafters, $NUM_PROMPTS spread
#      MT-Bench prompts x $MAX_NEW tokens, T=0, batch 1, bf16 then fp32 (each with a time budget: rows report
#      the prompts actually run), with per-step time split and launch / memory floors;
#   3. transformers' generate with its static (compiled) cache on a few prompts, as the bar to beat.
# Raw JSON: $OUT/fast_engine_h200.json (+ the per-phase parts and logs).
# Quicker: KS=1,3,7 NUM_PROMPTS=4 MAX_NEW=128 TOTAL_S=240 bash lab/gpu/20_fast_engine.sh
# Plumbing dry run on a CPU: DEVICE=cpu RUN_TESTS=0 HF_PROMPTS=0 KS=2 NUM_PROMPTS=1 MAX_NEW=8 OUT=/tmp/o bash ...
set -uo pipefail
export PEAGLE_GGUF=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-/tmp/pk/cache}
export PYTHONPATH=. PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export KS=${KS:-1,2,3,4,5,6,7,8} NUM_PROMPTS=${NUM_PROMPTS:-12} MAX_NEW=${MAX_NEW:-256}
TOTAL_S=${TOTAL_S:-420}
OUT=${OUT:-/tmp/fast_engine_out}; mkdir -p "$OUT"
export COMMAND="KS=$KS NUM_PROMPTS=$NUM_PROMPTS MAX_NEW=$MAX_NEW TOTAL_S=$TOTAL_S bash lab/gpu/20_fast_engine.sh"
PY="python benchmarks/gpu/fast_engine_bench.py"

# seconds for a phase: at most CAP, leaving RESERVE for the phases after it
left() { local cap=$1 reserve=$2 l=$((TOTAL_S - SECONDS - $2)); [ "$l" -lt "$cap" ] && echo $((l > 5 ? l : 5)) || echo "$cap"; }

bash lab/gpu/install_wheels.sh
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
timeout "$(left 90 300)" python -c "from peagle_lab.assets import resolve_target; print('target:', resolve_target(None))" 2>&1 | tail -n 1
echo "== target ready at ${SECONDS} s"

T=$(left 80 270)
if [ "${RUN_TESTS:-1}" = 1 ]; then
  PEAGLE_TEST_DEVICE=${DEVICE:-cuda} timeout "$T" python -m pytest -q -p no:cacheprovider -rs --durations=5 \
    tests/test_fast_engine.py > "$OUT/fast_engine_tests.log" 2>&1
  echo "== tests (rc $?, limit $T s) done at ${SECONDS} s"; tail -n 12 "$OUT/fast_engine_tests.log"
fi

T=$(left 130 185)
timeout "$T" $PY bench --dtype bfloat16 --budget $((T - 25)) --out "$OUT/part_bf16.json" 2>&1 | grep -av "Loading weights" \
  | tee "$OUT/bench_bf16.log" | grep -a "^\[" ; echo "== bf16 bench (limit $T s) done at ${SECONDS} s"

T=$(left 100 85)
timeout "$T" $PY bench --dtype float32 --budget $((T - 25)) --out "$OUT/part_fp32.json" 2>&1 | grep -av "Loading weights" \
  | tee "$OUT/bench_fp32.log" | grep -a "^\[" ; echo "== fp32 bench (limit $T s) done at ${SECONDS} s"

T=$(left 75 10)
timeout "$T" $PY hf-static --dtype bfloat16 --out "$OUT/part_hf_static.json" 2>&1 | grep -av "Loading weights" \
  | tee "$OUT/hf_static.log" | tail -n 6; echo "== hf static-cache reference (limit $T s) done at ${SECONDS} s"

timeout 30 $PY merge --out "$OUT/fast_engine_h200.json" "$OUT/part_bf16.json" "$OUT/part_fp32.json" "$OUT/part_hf_static.json"
echo "== all done at ${SECONDS} s"
