#!/usr/bin/env bash
# Objective A/B on the H200 (one call, after parking parts/gguf.part-00 + parts/data.tgz, then parts/gguf.part-01):
# fine-tune the shipped P-EAGLE drafter side by side with --objective kl and --objective argmax-ce, same data, lr and
# wall time, and bring both exports back (their AL is replayed on CPU over all 80 MT-Bench prompts).
# Carry: parts/gguf.part-02 parts/wheels
set -uxo pipefail
export PEAGLE_GGUF=/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf PEAGLE_CACHE=/tmp/pk/cache PYTHONPATH=. PYTHONUNBUFFERED=1
python -m pip install -q --no-deps parts/wheels/*.whl
[ -f "$PEAGLE_GGUF" ] || cat /tmp/pk/gguf.part-00 /tmp/pk/gguf.part-01 parts/gguf.part-02 > "$PEAGLE_GGUF"
python -c "from peagle_lab.assets import resolve_target; print(resolve_target(None))" 2>&1 | tail -n 1
echo "target ready at ${SECONDS} s"
for obj in kl argmax-ce; do
  OMP_NUM_THREADS=4 python -m peagle_lab train --method peagle --init-from peagle_lab/drafters/peagle-smollm2 \
    --objective $obj --group-by-length --layout padded --out /tmp/pk/ft-$obj --export /tmp/pk/ft-$obj-export \
    --data /tmp/pk/data --device cuda --batch-size 32 --max-len 768 --steps 100000 --warmup-steps 20 \
    --lr ${LR:-3e-4} --checkpoint-every 500 --max-minutes ${TRAIN_MINUTES:-3.5} > /tmp/pk/ft-$obj.log 2>&1 &
done
wait
echo "trained at ${SECONDS} s"
for obj in kl argmax-ce; do
  tail -c 600 /tmp/pk/ft-$obj.log; echo
  tar czf "$OUT/ft-$obj.tgz" -C /tmp/pk ft-$obj-export
done
ls -la "$OUT"
