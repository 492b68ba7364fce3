#!/usr/bin/env bash
# Train drafters side by side on one GPU: join and convert the GGUF, then start every run in $RUNS in the
# background (setsid: the runs outlive this command and export themselves) on the same data, batch and wall
# time; 11_collect.sh, run next (within 30 s), waits for their exports and brings them back.
#   RUNS="name:method:layers:mlp:vd ..."  vd "shared" = --set share_lm_head=true (the target's output layer, full
#     vocabulary). The default trains EAGLE-3 1L and P-EAGLE 4L through the target's head beside the shipped
#     P-EAGLE shape (results/train_target_head_h200.json). Other recorded sets:
#     the shipped pair (results/train_shipped_pair_h200.json):
#       RUNS="eagle-smollm2:eagle:1:1024:4096 peagle3-smollm2:peagle:3:256:4096 peagle4-smollm2:peagle:4:256:2048"
#     drafters above the shipping size limit (results/train_capacity_h200.json; 11_collect.sh returns them in parts):
#       RUNS="peagleL4-smollm2:peagle:4:1536:shared peagleL2-smollm2:peagle:2:1536:shared eagleL2-smollm2:eagle:2:1536:shared"
#   TRAIN_MINUTES (13; the recorded runs used 20), BATCH (32), LR (1e-3), VAL_PROMPTS (10),
#   CALL_SECONDS (550: how long this command holds the machine, e.g. 90 to hand over to 11_collect.sh sooner)
# Data: /tmp/pk/data and /tmp/pk/data_t07, parked by 06_park.sh. Validation AL (replayed, = the engine's at K=7 on
# VAL_PROMPTS MT-Bench prompts) is logged at every checkpoint. Batches are grouped by length (1.5x supervised
# elements/s on the H200: results/train_step_grouped_h200.json).
# Run after 06_park.sh twice; this command carries parts/gguf.part-02 (parts/wheels parked by 06_park.sh):
#   TRAIN_MINUTES=20 CALL_SECONDS=90 bash lab/gpu/10_train.sh
set -uxo pipefail
export PEAGLE_GGUF=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-/tmp/pk/cache} PYTHONPATH=. PYTHONUNBUFFERED=1
bash lab/gpu/install_wheels.sh
bash lab/gpu/join_gguf.sh || exit 1
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
