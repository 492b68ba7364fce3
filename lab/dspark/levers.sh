#!/usr/bin/env bash
# Started by gpu.sh (PIPELINE=levers) under setsid: two levers on the shipped DSpark drafter, measured side by side.
#   more steps:    fine-tune the shipped drafter (3,255 steps) for up to 2,244 more, to P-EAGLE's 5,499, on the
#                  same regenerated data (lr 3e-4, a new cosine);
#   denser blocks: the same fine-tune with 256 block anchors a conversation instead of 64 (more supervised
#                  positions a step).
# Then the replay eval (80 MT-Bench, 128 tokens, K 3/5/7) of the shipped drafter and both arms on one set of replies.
source "$(dirname "$0")/prelude.sh"
python -m peagle_lab regenerate --engine vllm --prompts $W/sharegpt_turns.jsonl --all-turns \
  --num-prompts ${CONVS:-16384} --temperature 0 --max-new-tokens 256 --max-prompt-tokens 640 \
  --batch-size 1024 --shard-size 4096 --device cuda --dtype bfloat16 --gpu-memory-utilization 0.4 \
  --out $W/data > $W/regen.log 2>&1
tail -n 3 $W/regen.log
touch $W/regen.done
stamp "regenerated"
for arm in more dense; do
  extra=""; [ $arm = dense ] && extra="--set blocks=256"
  python -m peagle_lab train --preset dspark --init-from $W/shipped/dspark-smollm2 $extra --lr 3e-4 \
    --data $W/data --out $W/run-$arm --export $W/dspark-$arm --device cuda --steps ${STEPS:-2244} \
    --max-minutes ${TRAIN_MIN:-8} > $W/train-$arm.log 2>&1 &
done
wait
for arm in more dense; do tail -n 2 $W/train-$arm.log; done
stamp "trained"
python lab/dspark/eval.py --drafters dspark=$W/shipped/dspark-smollm2 dspark_more=$W/dspark-more \
  dspark_dense=$W/dspark-dense --xcheck 0 --out $W/dspark_levers_mtbench80.json > $W/eval.log 2>&1
tail -n 5 $W/eval.log
stamp "evaluated"
touch $W/done
