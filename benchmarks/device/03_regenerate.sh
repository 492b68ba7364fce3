#!/usr/bin/env bash
# Device call 3: join and convert the GGUF; run the engine's tests and a `peagle-lab bench` on the GPU
# (the "same code runs on a GPU" check, shipped drafters); then regenerate SAMPLED replies
# (temperature 0.7: fewer of the greedy replies' loops; the labels stay exact because training computes
# the target's logits online on whatever text) until the call's time is nearly spent.
# Carry: parts/gguf.part-02 parts/sharegpt_mix.jsonl.gz (ShareGPT prompts 10240.. first, then 0..10239)
set -uxo pipefail
export PEAGLE_GGUF=/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf PEAGLE_CACHE=/tmp/pk/cache PYTHONPATH=. PYTHONUNBUFFERED=1
[ -f "$PEAGLE_GGUF" ] || cat /tmp/pk/gguf.part-00 /tmp/pk/gguf.part-01 parts/gguf.part-02 > "$PEAGLE_GGUF"
gunzip -c parts/sharegpt_mix.jsonl.gz > /tmp/pk/sharegpt_mix.jsonl
python -c "from peagle_lab.assets import resolve_target; print(resolve_target(None))"
echo "converted at ${SECONDS} s"
PEAGLE_TEST_DEVICE=cuda timeout 100 python -m pytest -q -p no:cacheprovider -x tests/test_engine.py 2>&1 | tail -n 15 | tee "$OUT/gpu_engine_tests.log"
echo "engine tests done at ${SECONDS} s"
N=8 M=128 KS=3,7 EAGLE=peagle_lab/drafters/eagle-smollm2 PEAGLE=peagle_lab/drafters/peagle-smollm2 \
  timeout 120 python benchmarks/device/gpu_bench.py 2>&1 | tail -n 12
echo "gpu bench done at ${SECONDS} s"
left=$(( ${CALL_SECONDS:-560} - SECONDS ))
timeout "$left" python -m peagle_lab regenerate --prompts /tmp/pk/sharegpt_mix.jsonl --num-prompts 16000 \
  --out /tmp/pk/data_t07 --max-new-tokens 384 --batch-size ${BATCH:-512} --shard-size 512 --temperature 0.7 --seed 1 \
  --device cuda 2>&1 | tail -c 600 || true
echo "regenerated until ${SECONDS} s"
tar czf "$OUT/data_t07.tgz" -C /tmp/pk data_t07
python - <<'PY'
import glob, torch
n = t = r = 0
for p in sorted(glob.glob("/tmp/pk/data_t07/shard-*.pt")):
    for s in torch.load(p):
        n += 1; t += s["ids"].numel(); r += s["ids"].numel() - s["prompt_len"]
print(f"conversations {n}, tokens {t}, reply tokens {r}")
PY
ls -la "$OUT"
