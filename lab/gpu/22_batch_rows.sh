#!/usr/bin/env bash
# Batched rows on one GPU, from the repository root, in <= $TOTAL_S (540) s, after 06_park.sh twice (carrying only
# parts/gguf.part-00, then -01; this call carries parts/gguf.part-02 (parts/wheels parked by 06_park.sh)):
#   1. the CUDA tests of the batched engine (tests/test_batched.py: the compiled Triton kernel, never the
#      interpreter; each request's greedy output, drafts and acceptance in a batch == alone == AR; bench's batch rows on
#      CUDA) and the kernel (tests/test_kernels.py: the compiled kernel == its torch reference);
#   2. `peagle-lab bench --device cuda` (--engine auto) with --methods ar,eagle,peagle and the shipped drafters at K in
#      $KS, T=0, $MAX_NEW tokens, $DTYPE, one call per batch size in $BATCH_SIZES, each with its own time limit:
#      B = 1 on $NUM_PROMPTS spread MT-Bench prompts (the fast engine: static caches, CUDA graphs), every B > 1 on
#      $NUM_PROMPTS rounded up to a multiple of B (full batches: B = 64 decodes 64 prompts at once) through the
#      batched teaching engine (rows say "engine": "teaching-batched"); identical_to_ar compares every request with
#      single-request AR (the fast engine's, untimed, when the call has no batch-1 row).
# Raw JSON: $OUT/batch_rows_h200.json (the calls' rows together) + $OUT/batch_rows_b*.json and logs per call.
# K = 7 as a second call on the same warm machine (the target stays converted in /tmp/pk/cache):
#   RUN_TESTS=0 KS=7 OUT=$OUT/k7 bash lab/gpu/22_batch_rows.sh      (expected: ~20 s + ~60-110 s per batch size)
# Quicker: BATCH_SIZES="1 8 32" MAX_NEW=128 TOTAL_S=300 bash lab/gpu/22_batch_rows.sh
# COMPILE=default (or max-autotune-no-cudagraphs) fuses the batch-1 row's steps (the fast engine; B > 1 rows run the
# batched teaching engine, which has no compiled path).
# Plumbing dry run on a CPU: DEVICE=cpu RUN_TESTS=0 KS=2 BATCH_SIZES="1 2" NUM_PROMPTS=2 MAX_NEW=4 OUT=/tmp/o bash ...
set -uo pipefail
export PEAGLE_GGUF=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-/tmp/pk/cache}
export PYTHONPATH=. PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
KS=${KS:-3} BATCH_SIZES=${BATCH_SIZES:-1 8 32 64} NUM_PROMPTS=${NUM_PROMPTS:-12} MAX_NEW=${MAX_NEW:-256}
DTYPE=${DTYPE:-float32} DEVICE=${DEVICE:-cuda} TOTAL_S=${TOTAL_S:-540}
OUT=${OUT:-/tmp/batch_rows_out}; mkdir -p "$OUT"
COMMAND="COMPILE=${COMPILE:-} KS=$KS BATCH_SIZES=\"$BATCH_SIZES\" NUM_PROMPTS=$NUM_PROMPTS MAX_NEW=$MAX_NEW DTYPE=$DTYPE TOTAL_S=$TOTAL_S bash lab/gpu/22_batch_rows.sh"

# seconds for a phase: at most CAP, leaving RESERVE for the phases after it
left() { local cap=$1 l=$((TOTAL_S - SECONDS - $2)); [ "$l" -lt "$cap" ] && echo $((l > 5 ? l : 5)) || echo "$cap"; }

if [ "$DEVICE" = cuda ]; then
  bash lab/gpu/install_wheels.sh
  bash lab/gpu/join_gguf.sh || exit 1
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
fi
timeout "$(left 90 400)" python -c "from peagle_lab.assets import resolve_target; print('target:', resolve_target(None))" 2>&1 | tail -n 1
echo "== target ready at ${SECONDS} s"

if [ "${RUN_TESTS:-1}" = 1 ]; then
  T=$(left 110 330)
  PEAGLE_TEST_DEVICE=$DEVICE timeout "$T" python -m pytest -q -p no:cacheprovider -rs --durations=8 \
    tests/test_batched.py tests/test_kernels.py > "$OUT/batch_rows_tests.log" 2>&1
  echo "== tests (rc $?, limit $T s) done at ${SECONDS} s"; tail -n 14 "$OUT/batch_rows_tests.log"
fi

set -- $BATCH_SIZES
parts=()
while [ $# -gt 0 ]; do
  B=$1; shift
  n=$(( B == 1 ? NUM_PROMPTS : (NUM_PROMPTS + B - 1) / B * B ))
  T=$(left 160 $(( 75 * $# + 10 )))                 # leave 75 s for each batch size still to come, 10 s for the merge
  fuse=(); [ "$B" = 1 ] && [ -n "${COMPILE:-}" ] && fuse=(--compile "$COMPILE")   # the fast engine (B = 1) only
  timeout "$T" python -m peagle_lab bench --device "$DEVICE" --dtype "$DTYPE" --methods ar,eagle,peagle --k "$KS" \
    --prompts mt-bench --num-prompts "$n" --spread --max-new-tokens "$MAX_NEW" --batch-size "$B" "${fuse[@]}" \
    --time-budget $((T - 30)) --json "$OUT/batch_rows_b$B.json" > "$OUT/batch_rows_b$B.log" 2>&1
  echo "== batch $B: $n prompts (rc $?, limit $T s) done at ${SECONDS} s"
  parts+=("$OUT/batch_rows_b$B.json")
  python - "$OUT/batch_rows_b$B.json" <<'EOF' || tail -n 5 "$OUT/batch_rows_b$B.log"
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"  B={r['batch_size']:<3} {r['engine']:17s} {r['method']:6s} k={r['k']!s:4s} {r['tokens_per_s']:8.1f} tok/s  "
          f"AL {'-' if r['acceptance_length'] is None else round(r['acceptance_length'], 2)}  identical {r['identical_to_ar']}  prompts {r['num_prompts']}")
EOF
done

COMMAND="$COMMAND" timeout 30 python - "$OUT/batch_rows_h200.json" "${parts[@]}" <<'EOF'
"""One raw JSON: every call's rows, each call's settings, and which calls left nothing (timed out or crashed)."""
import json, os, sys, time
from pathlib import Path

import torch

from peagle_lab.info import collect

merged = {"command": os.environ["COMMAND"], "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "machine": torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device",
          "calls": {}, "results": [], "errors": {}}
for part in sys.argv[2:]:
    name = Path(part).stem
    if not Path(part).exists():
        merged["errors"][name] = "missing: the call timed out or crashed before writing (see its .log)"
        continue
    data = json.loads(Path(part).read_text())
    merged["calls"][name] = {k: data.get(k) for k in ("command", "settings", "date")}
    merged["results"] += data["results"]
merged["info"] = collect(count_prompts=False)
Path(sys.argv[1]).write_text(json.dumps(merged, indent=1) + "\n")
print(f"wrote {sys.argv[1]}: {len(merged['results'])} rows, errors {merged['errors'] or 'none'}")
EOF
echo "== all done at ${SECONDS} s"
