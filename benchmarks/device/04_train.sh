#!/usr/bin/env bash
# Device call 3 of 4: join the GGUF, unpack the regenerated data (benchmarks/device/02_regenerate.sh
# made it on 2026-11-30), and train the EAGLE-3 and the P-EAGLE drafter side by side on one H200,
# same data, same batch and the same wall-time budget. The drafters stay on the machine for call 4.
# Carry: parts/gguf.part-02 parts/data.tgz parts/wheels
# Lesson of 2026-12-01: EAGLE-3 must train with --attention dense (auto does that now).
set -uxo pipefail
export PEAGLE_GGUF=/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf PEAGLE_CACHE=/tmp/pk/cache PYTHONPATH=. PYTHONUNBUFFERED=1
[ -f "$PEAGLE_GGUF" ] || cat /tmp/pk/gguf.part-00 /tmp/pk/gguf.part-01 parts/gguf.part-02 > "$PEAGLE_GGUF"
[ -d /tmp/pk/data ] || tar xzf parts/data.tgz -C /tmp/pk
python -m pip install -q --no-deps parts/wheels/*.whl 2>/dev/null || true
# Convert the GGUF once, before the clock of the two runs starts (it took about a minute there).
python -c "from peagle_lab.assets import resolve_target; print(resolve_target(None))"
MIN=${TRAIN_MINUTES:-7.3}
common="--data /tmp/pk/data --device cuda --draft-vocab-size 2048 --max-depth 8 --batch-size ${BATCH:-32} --max-len 640 \
  --steps 100000 --warmup-steps 100 --lr ${LR:-1e-3} --checkpoint-every 200 --max-minutes $MIN --attention ${ATTN:-auto}"
timeout 575 python -m peagle_lab train --method eagle --num-layers 1 --intermediate-size 1024 --out /tmp/pk/run-eagle \
  --export /tmp/pk/eagle-smollm2 $common > /tmp/pk/train-eagle.log 2>&1 &
timeout 575 python -m peagle_lab train --method peagle --num-layers 2 --intermediate-size 512 --out /tmp/pk/run-peagle \
  --export /tmp/pk/peagle-smollm2 $common > /tmp/pk/train-peagle.log 2>&1 &
wait
nvidia-smi --query-gpu=memory.used --format=csv
for m in eagle peagle; do
  cp /tmp/pk/train-$m.log "$OUT/"; tail -c 1200 /tmp/pk/train-$m.log
  [ -d /tmp/pk/$m-smollm2 ] && tar czf "$OUT/$m-smollm2.tgz" -C /tmp/pk $m-smollm2
done
ls -la "$OUT"
