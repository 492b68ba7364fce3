#!/usr/bin/env bash
# Next training session (after 06_park.sh x2): join and convert the GGUF, then start every run in $RUNS in the
# background (setsid: they outlive this call and export themselves), side by side on the one GPU with the same
# data, batch and wall time; 11_collect.sh (the next call, within 30 s) waits for their exports.
#   RUNS="name:method:layers:mlp:vd ..."   vd "shared" = --share-lm-head (the target's output layer, full vocabulary).
#   Run 5 (2026-12-01) used "eagle-smollm2:eagle:1:1024:4096 peagle3-smollm2:peagle:3:256:4096 peagle4-smollm2:peagle:4:256:2048".
#   Default: run 6 (2026-12-01e), both methods with the target's head (no draft lm_head: 4.7 MB freed, 100% coverage)
#   beside the shipped P-EAGLE shape as a control. Result (all 80 MT-Bench prompts, K=7): EAGLE-3 2.19 -> 2.30,
#   P-EAGLE 1.94 -> 1.96 (results/device_train_2026-12-01e.json, replay_acceptance_mtbench80.json).
#   Run 7 (2026-12-01f) measured the 16 MiB cap with RUNS="peagleL4-smollm2:peagle:4:1536:shared
#   peagleL2-smollm2:peagle:2:1536:shared eagleL2-smollm2:eagle:2:1536:shared" (full-width MLP, 17-31 MB, not shippable;
#   11_collect.sh brings such archives back in parts).
# Validation AL (replayed, = the engine's at K=7 on 10 MT-Bench prompts) is logged at every checkpoint.
# Batches grouped by length (1.5x supervised elements/s on the H200: results/train_step_grouped_h200.json).
# Carry: parts/gguf.part-02 (parts/wheels parked by 06_park.sh)
set -uxo pipefail
export PEAGLE_GGUF=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-/tmp/pk/cache} PYTHONPATH=. PYTHONUNBUFFERED=1
bash benchmarks/gpu/install_wheels.sh
bash benchmarks/gpu/join_gguf.sh || exit 1
python -c "from peagle_lab.assets import resolve_target; print(resolve_target(None))" 2>&1 | tail -n 1
rm -rf /tmp/pk/code && mkdir -p /tmp/pk/code /tmp/pk/mix && cp -r peagle_lab /tmp/pk/code/
for f in /tmp/pk/data/shard-*.pt; do b=$(basename "$f"); ln -sf "$f" "/tmp/pk/mix/shard-0${b#shard-}"; done
for f in /tmp/pk/data_t07/shard-*.pt; do b=$(basename "$f"); ln -sf "$f" "/tmp/pk/mix/shard-1${b#shard-}"; done
RUNS=${RUNS:-"eagleS-smollm2:eagle:1:1536:shared peagleS-smollm2:peagle:4:384:shared peagle3-smollm2:peagle:3:256:4096"}
echo "$RUNS" > /tmp/pk/runs.txt
cd /tmp/pk/code
for r in $RUNS; do
  IFS=: read -r name method layers mlp vd <<< "$r"
  vocab="--draft-vocab-size $vd"; [ "$vd" = shared ] && vocab="--set share_lm_head=true"
  OMP_NUM_THREADS=4 setsid nohup python -m peagle_lab train --method "$method" --num-layers "$layers" \
    --set intermediate_size="$mlp" $vocab --set group_by_length=true --out "/tmp/pk/run-$name" --export "/tmp/pk/$name" \
    --data /tmp/pk/mix --device cuda --set max_depth=8 --batch-size ${BATCH:-32} --max-len 768 --steps 100000 \
    --set warmup_steps=100 --lr ${LR:-1e-3} --set checkpoint_every=200 --max-minutes ${TRAIN_MINUTES:-13} --val-prompts ${VAL_PROMPTS:-10} \
    > "/tmp/pk/train-$name.log" 2>&1 < /dev/null &
done
cd - >/dev/null
echo "training started at ${SECONDS} s"
left=$(( ${CALL_SECONDS:-550} - SECONDS )); [ "$left" -gt 0 ] && sleep "$left"
for r in $RUNS; do name=${r%%:*}; grep -a '^\[' "/tmp/pk/train-$name.log"; tail -c 300 "/tmp/pk/train-$name.log"; echo; done
