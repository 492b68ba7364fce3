#!/usr/bin/env bash
# Device call 3 of 3: train the EAGLE-3 and the P-EAGLE drafter side by side on the same data and
# wall-time budget (two processes on one H200), export both in vLLM's layout to $OUT.
# Carry (fresh machine, after 01_prepare.sh): parts/gguf.part-ab parts/data.tgz
set -euxo pipefail
export PEAGLE_GGUF=/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf PEAGLE_CACHE=/tmp/pk/cache PYTHONPATH=. PYTHONUNBUFFERED=1
# On a fresh machine (the first was given back), rebuild what calls 1-2 left in /tmp.
if [ ! -f /tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf ] && [ -f parts/gguf.part-ab ]; then
  cat /tmp/pk/gguf.part-aa parts/gguf.part-ab > /tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf
fi
[ -d /tmp/pk/data ] || tar xzf parts/data.tgz -C /tmp/pk
MIN=${TRAIN_MINUTES:-7.5}
common="--data /tmp/pk/data --device cuda --draft-vocab-size 2048 --max-depth 8 --batch-size 16 --max-len 640 \
  --steps 100000 --warmup-steps 50 --lr 1e-3 --checkpoint-every 500 --max-minutes $MIN"
python -m peagle_lab train --method eagle --num-layers 1 --intermediate-size 1024 --out /tmp/pk/run-eagle \
  --export "$OUT/eagle-smollm2" $common > "$OUT/train-eagle.log" 2>&1 &
python -m peagle_lab train --method peagle --num-layers 2 --intermediate-size 512 --layout "${PEAGLE_LAYOUT:-packed}" --out /tmp/pk/run-peagle \
  --export "$OUT/peagle-smollm2" $common > "$OUT/train-peagle.log" 2>&1 &
wait
tail -c 1500 "$OUT/train-eagle.log"; tail -c 1500 "$OUT/train-peagle.log"
nvidia-smi --query-gpu=memory.used --format=csv
