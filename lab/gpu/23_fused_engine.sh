#!/usr/bin/env bash
# The fast engine's variants -- steps fused by torch.compile, the Triton cache attention, or both -- against the
# plain engine (compile off, SDPA attention), on one GPU, from the repository root, in <= $TOTAL_S s:
#   1. tests/test_fast_graphs.py and tests/test_cache_attention.py on CUDA (compiled + captured steps: logits ==
#      eager, greedy == AR; the compiled attention kernels == SDPA, lossless greedy inside graphs);
#   2. `bench --engine fast` plain: AR, EAGLE-3 and P-EAGLE at K in $KS, $NUM_PROMPTS spread MT-Bench
#      prompts x $MAX_NEW tokens, T=0, batch 1, $DTYPE, per-step time split and launch / memory floors;
#   3. the same per variant in $VARIANTS and per K (one process each, AR in each: its reference), so that a slow
#      compile loses one K, not all: rows carry warmup_s (compile + capture + one short generation) and the graphs
#      report each engine's compile_s;
#   4. `pair`: a row pair per (variant, method, K) with tokens/s and per-step verify / draft / host ratios;
#   5. PROFILE=1: benchmarks/gpu/step_profile.py for plain and every variant (kernels per step, by family).
# A machine's first compile takes 27-36 s per (method, K); later commands on the same machine reuse inductor's
# disk cache, so give the first command a larger TOTAL_S or fewer KS. The recorded fastest default
# (results/fused_engine_h200_pgraph_k3k7.json): VARIANTS=default+triton+pgraph KS=3,7.
# Every bench phase has a time budget: rows report the prompts actually run (the first prompt always runs).
# Raw JSON: $OUT/fused_engine_h200.json (+ the per-phase parts and logs).
# Needs the GGUF parked first (README.md: 06_park.sh with gguf.part-00, then -01; this command carries
# parts/gguf.part-02 (parts/wheels parked by 06_park.sh)).
# Plumbing dry run on a CPU (PEAGLE_GGUF / PEAGLE_CACHE set to your GGUF and cache; compiling the 30-layer
# target's AR step on a 2-core CPU takes ~25 s, AR + EAGLE-3 + P-EAGLE at one K ~70 s):
#   DEVICE=cpu RUN_TESTS=0 DTYPE=float32 KS=2 AR_CHECK=1 NUM_PROMPTS=1 MAX_NEW=16 OUT=/tmp/o \
#     bash lab/gpu/23_fused_engine.sh
set -uo pipefail
export PEAGLE_GGUF=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-/tmp/pk/cache}
export PYTHONPATH=. PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export KS=${KS:-3,5,7} METHODS=${METHODS:-ar,eagle,peagle} NUM_PROMPTS=${NUM_PROMPTS:-12} MAX_NEW=${MAX_NEW:-256}
export AR_CHECK=${AR_CHECK:-3}                    # prompts on which compiled and plain greedy AR are compared
# variants to compare with plain (compile off, SDPA attention), each against the same plain phase: an inductor mode
# (default, max-autotune-no-cudagraphs) or plain, with +triton for the Triton cache attention (--attention triton)
# and/or +nocudnn for SDPA without its cuDNN backend (prompt pass and steps), +pgraph for the prompt's pass in
# captured 64-token-bucket graphs (plain: eager, SDPA without cuDNN), e.g.
# VARIANTS=plain+triton,plain+nocudnn,default+triton. COMPILE_MODES is read when VARIANTS is unset.
VARIANTS=${VARIANTS:-${COMPILE_MODES:-default}}
DTYPE=${DTYPE:-bfloat16}
TOTAL_S=${TOTAL_S:-420}
PHASE_S=${PHASE_S:-150}                          # cap per (variant, K) phase: max-autotune compiles ~60 s a step
OUT=${OUT:-/tmp/fused_engine_out}; mkdir -p "$OUT"
export COMMAND="KS=$KS NUM_PROMPTS=$NUM_PROMPTS MAX_NEW=$MAX_NEW TOTAL_S=$TOTAL_S VARIANTS=$VARIANTS RUN_TESTS=${RUN_TESTS:-1} bash lab/gpu/23_fused_engine.sh"
PY="python benchmarks/gpu/fast_engine_bench.py"
IFS=, read -r -a KLIST <<< "$KS"

# seconds for a phase: at most CAP, leaving RESERVE for the phases after it
left() { local cap=$1 reserve=$2 l=$((TOTAL_S - SECONDS - $2)); [ "$l" -lt "$cap" ] && echo $((l > 5 ? l : 5)) || echo "$cap"; }
# one bench phase: LIMIT OUT-NAME LOG-NAME [extra args]; prints its rows
bench() {
  local limit=$1 part=$2 log=$3; shift 3
  timeout "$limit" $PY bench --dtype "$DTYPE" --budget $((limit - 20)) --out "$OUT/$part.json" "$@" 2>&1 \
    | grep -av "Loading weights" | tee "$OUT/$log.log" | grep -a "^\["
  echo "== $part (limit $limit s) done at ${SECONDS} s"
}

bash lab/gpu/install_wheels.sh
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
timeout "$(left 90 330)" python -c "from peagle_lab.assets import resolve_target; print('target:', resolve_target(None))" 2>&1 | tail -n 1
echo "== target ready at ${SECONDS} s"

if [ "${RUN_TESTS:-1}" = 1 ]; then
  T=$(left ${TESTS_S:-150} 290)                 # the compiled tests compile once per shape: ~30 s each on a cold cache
  PEAGLE_TEST_DEVICE=${DEVICE:-cuda} timeout "$T" python -m pytest -q -p no:cacheprovider -rs --durations=8 \
    tests/test_fast_graphs.py tests/test_cache_attention.py > "$OUT/fused_engine_tests.log" 2>&1
  echo "== tests (rc $?, limit $T s) done at ${SECONDS} s"; tail -n 12 "$OUT/fused_engine_tests.log"
fi

IFS=, read -r -a MLIST <<< "$VARIANTS"
n_phases=$(( ${#KLIST[@]} * ${#MLIST[@]} ))
bench "$(left 70 $((75 * n_phases + 10)))" part_plain bench_plain
parts=("$OUT/part_plain.json")
j=0
for variant in "${MLIST[@]}"; do                  # one process per (variant, K); compiled ones reuse the disk cache
  mode=${variant%%+*}
  for k in "${KLIST[@]}"; do
    j=$((j + 1))
    case $mode in plain) name=plain; flag=(); ;; default) name=fused; flag=(--compile); ;;
      *) name=${mode%%-*}; flag=(--compile "$mode"); ;; esac
    case +$variant+ in *+triton+*) name=${name}_triton; flag+=(--attention triton); ;; esac
    case +$variant+ in *+nocudnn+*) name=${name}_nocudnn; flag+=(--no-cudnn-sdpa); ;; esac
    case +$variant+ in *+pgraph+*) name=${name}_pgraph; flag+=(--prompt-graphs); ;; esac
    name=${name}_k$k
    KS=$k bench "$(left ${PHASE_S:-150} $((75 * (n_phases - j) + 10)))" "part_$name" "bench_$name" "${flag[@]}"
    parts+=("$OUT/part_$name.json")
  done
done

timeout 30 $PY pair --out "$OUT/fused_engine_h200.json" "${parts[@]}"
# PROFILE=1: then, in the time left, where each step's time goes (kernels per step, their summed device time, the top
# kernels, against the graph's replay time) for plain and every mode: results $OUT/step_profile.json
if [ "${PROFILE:-0}" = 1 ]; then
  timeout "$(left 240 5)" python benchmarks/gpu/step_profile.py --out "$OUT/step_profile.json" --modes "plain,$VARIANTS" \
    --k "${KLIST[-1]}" --dtype "$DTYPE" > "$OUT/step_profile.log" 2>&1
  echo "== step profile (rc $?) done at ${SECONDS} s"; grep -a "^\[" "$OUT/step_profile.log"
fi
echo "== all done at ${SECONDS} s"
