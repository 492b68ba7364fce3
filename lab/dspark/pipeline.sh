#!/usr/bin/env bash
# Started by gpu.sh under setsid. Every stage writes its raw record to /tmp/ds (gpu.sh brings them back).
source "$(dirname "$0")/prelude.sh"
# 1. data: the target's own greedy replies to every turn of 16,384 ShareGPT conversations (the shipped pair's size)
python -m peagle_lab regenerate --engine vllm --prompts $W/sharegpt_turns.jsonl --all-turns \
  --num-prompts ${CONVS:-16384} --temperature 0 --max-new-tokens 256 --max-prompt-tokens 640 \
  --batch-size 1024 --shard-size 4096 --device cuda --dtype bfloat16 --out $W/data > $W/regen.log 2>&1
tail -n 3 $W/regen.log
stamp "regenerated"
# 2. DSpark and its DFlash arm (the same backbone, Markov head off), side by side, same data, same steps
for arm in dspark dflash; do
  flag=""; [ $arm = dflash ] && flag="--set markov_head=false"
  python -m peagle_lab train --preset dspark $flag --data $W/data --out $W/run-$arm --export $W/$arm-smollm2 \
    --device cuda --steps ${STEPS:-4440} --max-minutes ${TRAIN_MIN:-9} > $W/train-$arm.log 2>&1 &
done
wait
for arm in dspark dflash; do tail -n 2 $W/train-$arm.log; done
stamp "trained"
# 3. acceptance: 80 MT-Bench, 128 tokens, K 3/5/7, beside the shipped pair (one set of greedy replies), while the
#    vLLM servers of step 4 start (compile and capture on the host); their loads wait for the replay to finish
python lab/dspark/serve.py --dspark $W/dspark-smollm2 --out $W/dspark_vllm_cuda.json --gate $W/eval.done \
  > $W/serve.log 2>&1 &
python lab/dspark/eval.py --drafters dspark=$W/dspark-smollm2 dflash=$W/dflash-smollm2 \
  eagle=$W/shipped/eagle-smollm2 peagle=$W/shipped/peagle-smollm2 --out $W/dspark_eval_mtbench80.json \
  > $W/eval.log 2>&1
tail -n 5 $W/eval.log
touch $W/eval.done
stamp "evaluated"
# 4. CUDA vLLM: every method, c=1 in 3 interleaved rounds, c=4 and c=16; a float32 DSpark server for the cross-check
wait
tail -n 12 $W/serve.log
stamp "served"
touch $W/done
