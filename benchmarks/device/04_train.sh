#!/usr/bin/env bash
# Device call 4: train the EAGLE-3 and the P-EAGLE drafter side by side on one H200: the same data
# (greedy replies of 2026-11-30 + the sampled replies of call 3), the same batch, the same wall-time
# budget on the same GPU. (--head-init target showed no gain on CPU: results/head_init_ab_cpu.json).
# EAGLE-3 uses the padded TTT layout (one padded batch per depth; dense packed masks cost 1.0 s/step);
# P-EAGLE the same padded layout (its flex-attention gradient test failed on the H200 on 2026-12-01).
# Carry: nothing (everything is on the machine after calls 1-3).
set -uxo pipefail
shopt -s nullglob
export PEAGLE_GGUF=/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf PEAGLE_CACHE=/tmp/pk/cache PYTHONPATH=. PYTHONUNBUFFERED=1
mkdir -p /tmp/pk/mix
for f in /tmp/pk/data/shard-*.pt; do b=$(basename "$f"); ln -sf "$f" "/tmp/pk/mix/shard-0${b#shard-}"; done
for f in /tmp/pk/data_t07/shard-*.pt; do b=$(basename "$f"); ln -sf "$f" "/tmp/pk/mix/shard-1${b#shard-}"; done
ls /tmp/pk/mix | wc -l
# On 2026-12-01 each run spent ~3.5 min before its first step (both processes starting at once on the
# 16-core host; `train` now prints timed start-up phases) and `timeout 585` killed both before export:
# leave that much room, and keep --checkpoint-every small so a kill loses little.
MIN=${TRAIN_MINUTES:-5}
common="--data /tmp/pk/mix --device cuda --draft-vocab-size ${VD:-4096} --max-depth 8 --batch-size ${BATCH:-32} --max-len 768 \
  --steps 100000 --warmup-steps 100 --lr ${LR:-1e-3} --checkpoint-every 100 --max-minutes $MIN"
timeout 585 python -m peagle_lab train --method eagle --num-layers 1 --intermediate-size ${EAGLE_MLP:-1024} --layout ${EAGLE_LAYOUT:-padded} \
  --out /tmp/pk/run-eagle --export /tmp/pk/eagle-smollm2 $common > /tmp/pk/train-eagle.log 2>&1 &
timeout 585 python -m peagle_lab train --method peagle --num-layers ${PEAGLE_LAYERS:-2} --intermediate-size ${PEAGLE_MLP:-512} \
  --layout ${PEAGLE_LAYOUT:-padded} --out /tmp/pk/run-peagle --export /tmp/pk/peagle-smollm2 $common > /tmp/pk/train-peagle.log 2>&1 &
wait
nvidia-smi --query-gpu=memory.used --format=csv
for m in eagle peagle; do
  cp /tmp/pk/train-$m.log "$OUT/"; tail -c 1500 /tmp/pk/train-$m.log
  [ -d /tmp/pk/$m-smollm2 ] && tar czf "$OUT/$m-smollm2.tgz" -C /tmp/pk $m-smollm2
done
ls -la "$OUT"
