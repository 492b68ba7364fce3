#!/usr/bin/env bash
# Device session B, call 4: wait for both background trainings to export (or, near the call's end, stop them and
# export from their last checkpoint: resume ignores --steps, so --steps 1 exports at once), then bring back the
# drafters and the logs.
set -uxo pipefail
export PEAGLE_GGUF=/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf PEAGLE_CACHE=/tmp/pk/cache PYTHONPATH=/tmp/pk/code PYTHONUNBUFFERED=1
limit=${WAIT_SECONDS:-480}
while [ "$SECONDS" -lt "$limit" ]; do
  [ -f /tmp/pk/eagle-smollm2/training.json ] && [ -f /tmp/pk/peagle-smollm2/training.json ] && break
  sleep 5
done
echo "waited ${SECONDS} s"
pkill -f "peagle_lab train" && sleep 5
cd /tmp/pk/code
for m in eagle peagle; do
  if [ ! -f /tmp/pk/$m-smollm2/training.json ]; then
    L=1; MLP=1024; [ $m = peagle ] && L=2 && MLP=512
    timeout 60 python -m peagle_lab train --method $m --num-layers $L --intermediate-size $MLP --out /tmp/pk/run-$m \
      --export /tmp/pk/$m-smollm2 --data /tmp/pk/mix --device cuda --draft-vocab-size 4096 --max-depth 8 --batch-size ${BATCH:-32} \
      --max-len 768 --steps 1 --warmup-steps 100 --lr ${LR:-1e-3} --checkpoint-every 200 > /tmp/pk/export-$m.log 2>&1
    tail -n 3 /tmp/pk/export-$m.log
  fi
  cp /tmp/pk/train-$m.log "$OUT/"
  grep -a '^\[' /tmp/pk/train-$m.log; tail -c 600 /tmp/pk/train-$m.log; echo
  [ -d /tmp/pk/$m-smollm2 ] && tar czf "$OUT/$m-smollm2.tgz" -C /tmp/pk $m-smollm2
done
nvidia-smi --query-gpu=memory.used --format=csv
ls -la "$OUT"
