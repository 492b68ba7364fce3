#!/usr/bin/env bash
# Device call 2 of 3: join the GGUF, convert it once, regenerate replies to ShareGPT prompts with
# batched greedy generation on the GPU for at most REGEN_SECONDS, return the token ids.
# Carry: parts/gguf.part-ab parts/sharegpt.jsonl
set -euxo pipefail
cat /tmp/pk/gguf.part-aa parts/gguf.part-ab > /tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf
export PEAGLE_GGUF=/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf PEAGLE_CACHE=/tmp/pk/cache PYTHONPATH=. PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout "${REGEN_SECONDS:-420}" python -m peagle_lab regenerate --prompts parts/sharegpt.jsonl --num-prompts 16000 \
  --out /tmp/pk/data --max-new-tokens 256 --batch-size 256 --shard-size 1024 --device cuda || echo "regeneration stopped by its time limit"
echo "regenerate wall: $(( $(date +%s) - t0 )) s"
ls -la /tmp/pk/data
tar czf "$OUT/data.tgz" -C /tmp/pk data
python - <<'PY'
import glob, torch
n = t = r = 0
for p in sorted(glob.glob("/tmp/pk/data/shard-*.pt")):
    for s in torch.load(p):
        n += 1; t += s["ids"].numel(); r += s["ids"].numel() - s["prompt_len"]
print(f"conversations {n}, tokens {t}, reply tokens {r}")
PY
