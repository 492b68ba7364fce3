#!/usr/bin/env bash
# Device session B, call 3: join and convert the GGUF; time training steps with and without cuDNN attention
# (side by side, before anything else runs); the teaching engine's `peagle-lab bench` on the GPU; then start
# both trainings in the background (setsid: they outlive this call and export themselves) and, beside them,
# the engine's tests on CUDA and the flex-attention gradient test. Call 4 (08_collect.sh) waits for the exports.
# Carry: parts/gguf.part-02 parts/wheels
set -uxo pipefail
export PEAGLE_GGUF=/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf PEAGLE_CACHE=/tmp/pk/cache PYTHONPATH=. PYTHONUNBUFFERED=1
python -m pip install -q --no-deps parts/wheels/*.whl
[ -f "$PEAGLE_GGUF" ] || cat /tmp/pk/gguf.part-00 /tmp/pk/gguf.part-01 parts/gguf.part-02 > "$PEAGLE_GGUF"
python -c "from peagle_lab.assets import resolve_target; print(resolve_target(None))"
echo "converted at ${SECONDS} s"
timeout 100 python benchmarks/bench_train_step.py --steps 12 --json "$OUT/train_step_cudnn_h200.json" 2>&1 | grep '^{'
echo "train-step bench done at ${SECONDS} s"
N=8 M=128 KS=3,7 EAGLE=peagle_lab/drafters/eagle-smollm2 PEAGLE=peagle_lab/drafters/peagle-smollm2 \
  timeout 150 python benchmarks/device/gpu_bench.py 2>&1 | tail -n 12
echo "gpu bench done at ${SECONDS} s"
# Training: the shipped pair's shapes and recipe, same data (16,384 conversations), same wall time, side by side.
rm -rf /tmp/pk/code && mkdir -p /tmp/pk/code /tmp/pk/mix && cp -r peagle_lab /tmp/pk/code/
for f in /tmp/pk/data/shard-*.pt; do b=$(basename "$f"); ln -sf "$f" "/tmp/pk/mix/shard-0${b#shard-}"; done
for f in /tmp/pk/data_t07/shard-*.pt; do b=$(basename "$f"); ln -sf "$f" "/tmp/pk/mix/shard-1${b#shard-}"; done
ls /tmp/pk/mix | wc -l
MIN=${TRAIN_MINUTES:-12}
common="--data /tmp/pk/mix --device cuda --draft-vocab-size 4096 --max-depth 8 --batch-size ${BATCH:-32} --max-len 768 \
  --steps 100000 --warmup-steps 100 --lr ${LR:-1e-3} --checkpoint-every 200 --max-minutes $MIN"
cd /tmp/pk/code
OMP_NUM_THREADS=6 setsid nohup python -m peagle_lab train --method eagle --num-layers 1 --intermediate-size 1024 \
  --out /tmp/pk/run-eagle --export /tmp/pk/eagle-smollm2 $common > /tmp/pk/train-eagle.log 2>&1 < /dev/null &
OMP_NUM_THREADS=6 setsid nohup python -m peagle_lab train --method peagle --num-layers 2 --intermediate-size 512 \
  --out /tmp/pk/run-peagle --export /tmp/pk/peagle-smollm2 $common > /tmp/pk/train-peagle.log 2>&1 < /dev/null &
cd - >/dev/null
echo "training started at ${SECONDS} s"
PEAGLE_TEST_DEVICE=cuda OMP_NUM_THREADS=4 timeout 150 python -m pytest -q -p no:cacheprovider tests/test_engine.py \
  > "$OUT/gpu_engine_tests.log" 2>&1; tail -n 6 "$OUT/gpu_engine_tests.log"
OMP_NUM_THREADS=4 timeout 120 python -m pytest -q -p no:cacheprovider tests/test_partition.py -k "cuda or flex" 2>&1 \
  | grep -v DEBUG > "$OUT/flex_cuda_tests.log"; tail -n 4 "$OUT/flex_cuda_tests.log"
left=$(( ${CALL_SECONDS:-550} - SECONDS )); [ "$left" -gt 0 ] && sleep "$left"
for m in eagle peagle; do grep -a '^\[' /tmp/pk/train-$m.log; tail -c 400 /tmp/pk/train-$m.log; echo; done
echo "call ends at ${SECONDS} s"
