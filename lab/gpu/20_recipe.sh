#!/usr/bin/env bash
# The P-EAGLE recipe and its ablation on one GPU. Run after 06_park.sh twice (parking the GGUF's first two parts
# and parts/sharegpt_turns.jsonl.gz, ShareGPT's first 4,000 conversations as {"turns": [...]}); this command
# carries parts/gguf.part-02 (parts/wheels parked by 06_park.sh). It joins and converts the target, then starts in
# the background (setsid, so it outlives the command) a chain that
#   1. regenerates multi-turn data for REGEN_SECONDS (300), one process at a time, every human turn answered with
#      the target's own previous replies in context: one greedy reply per turn (data/greedy) and two sampled at
#      T=0.7 with other seeds (data/t07a, data/t07b); shards of SHARD (512) conversations, <= MAX_NEW (256) tokens;
#   2. trains every arm in $ARMS side by side for TRAIN_MINUTES (12) on the same data, batch and schedule;
# then holds the machine until CALL_SECONDS (540). 11_collect.sh (the next commands, within 30 s) brings the
# exports and logs back.
#   ARMS="name|method|data|flags"  data: all (greedy + both sampled) or greedy. An arm's flags come last, so they
#   override the shared ones (--lr 3e-4 --init-from peagle_lab/drafters/peagle-smollm2: a fine-tuning arm).
#   DATA_TGZ=lab/gpu/data/recipe_greedy_4119.tgz REGEN_SECONDS=0: train on the recorded multi-turn data;
#   REGEN_SETS="t07a t07b" with DATA_TGZ: regenerate only the sampled replies, beside the archive's greedy ones.
#   bash lab/gpu/20_recipe.sh
set -uxo pipefail
export PEAGLE_GGUF=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-/tmp/pk/cache} PYTHONPATH=. PYTHONUNBUFFERED=1
bash lab/gpu/install_wheels.sh
bash lab/gpu/join_gguf.sh || exit 1
python -c "from peagle_lab.assets import resolve_target; print(resolve_target(None))" 2>&1 | tail -n 1
rm -rf /tmp/pk/code && mkdir -p /tmp/pk/code && cp -r peagle_lab /tmp/pk/code/
[ -f /tmp/pk/sharegpt_turns.jsonl.gz ] && gunzip -c /tmp/pk/sharegpt_turns.jsonl.gz > /tmp/pk/sharegpt_turns.jsonl
# DATA_TGZ=lab/gpu/data/recipe_greedy_4119.tgz REGEN_SECONDS=0: train on the recorded data (folders
# data/greedy, gB, gC, gD of greedy multi-turn replies), no regeneration; "greedy" arms then see data/greedy alone.
[ -n "${DATA_TGZ:-}" ] && tar xzf "$DATA_TGZ" -C /tmp/pk
P="--num-layers 4 --set intermediate_size=384 --set share_lm_head=true --set max_depth=8 --set cod_ratio=0.8"
ARMS=${ARMS:-"peagleR|peagle|all|$P --set hidden_noise=0.05
peagleM0|peagle|all|$P --set hidden_noise=0.05 --set mask_token_id=0 --set learn_mask_embedding=false
peagleF16|peagle|all|$P --set hidden_noise=0.05 --set learn_mask_embedding=false
peagleN0|peagle|all|$P
peagleX1|peagle|greedy|$P --set hidden_noise=0.05
eagleR|eagle|all|--num-layers 1 --set intermediate_size=1536 --set share_lm_head=true --set max_depth=8 --set hidden_noise=0.05"}
echo "$ARMS" | cut -d'|' -f1 > /tmp/pk/runs.txt
cat > /tmp/pk/chain.sh <<CHAIN
set -x
cd /tmp/pk/code
export PEAGLE_GGUF=$PEAGLE_GGUF PEAGLE_CACHE=$PEAGLE_CACHE PYTHONUNBUFFERED=1
R="python -m peagle_lab regenerate --prompts /tmp/pk/sharegpt_turns.jsonl --all-turns --num-prompts 4000 --max-prompt-tokens 640 --max-new-tokens ${MAX_NEW:-256} --batch-size 512 --shard-size ${SHARD:-512} --device cuda"
# one process at a time (several on one GPU do not add up), an equal share of REGEN_SECONDS each;
# REGEN_SETS="t07a t07b" with DATA_TGZ: only the sampled replies, beside the archive's greedy ones (the x3 data arm)
for set in ${REGEN_SETS:-greedy t07a t07b}; do
  [ ${REGEN_SECONDS:-300} -gt 0 ] || break
  case \$set in greedy) T=""; ;; t07a) T="--temperature 0.7 --seed 1"; ;; t07b) T="--temperature 0.7 --seed 2"; ;;
    *) echo "REGEN_SETS: unknown set \$set (greedy, t07a or t07b)"; continue; ;; esac
  timeout $(( ${REGEN_SECONDS:-300} / $(echo ${REGEN_SETS:-greedy t07a t07b} | wc -w) )) \$R --out /tmp/pk/data/\$set \$T > /tmp/pk/regen-\$set.log 2>&1
done
mkdir -p /tmp/pk/mix/all /tmp/pk/mix/greedy
for dd in /tmp/pk/data/*/; do d=\$(basename "\$dd"); for f in "\$dd"shard-*.pt; do b=\$(basename "\$f"); ln -sf "\$f" "/tmp/pk/mix/all/shard-\$d-\${b#shard-}"; done; done
for f in /tmp/pk/data/greedy/shard-*.pt; do ln -sf "\$f" "/tmp/pk/mix/greedy/\$(basename "\$f")"; done
python - <<'PY' > /tmp/pk/data_stats.json
import glob, json, os, torch
out = {}
for d in sorted(os.path.basename(x.rstrip("/")) for x in glob.glob("/tmp/pk/data/*/")):
    n = t = r = 0
    for p in sorted(glob.glob(f"/tmp/pk/data/{d}/shard-*.pt")):
        for s in torch.load(p):
            n += 1; t += s["ids"].numel(); r += s["ids"].numel() - s["prompt_len"]
    out[d] = {"samples": n, "tokens": t, "reply_tokens": r}
print(json.dumps(out))
PY
cat /tmp/pk/data_stats.json
CHAIN
echo "$ARMS" | while IFS='|' read -r name method data flags; do
  cat >> /tmp/pk/chain.sh <<CHAIN
OMP_NUM_THREADS=2 python -m peagle_lab train --method $method --set group_by_length=true --data /tmp/pk/mix/$data \
  --out /tmp/pk/run-$name --export /tmp/pk/$name --device cuda --batch-size ${BATCH:-32} --max-len 1024 --steps 100000 \
  --set warmup_steps=100 --lr ${LR:-1e-3} --set checkpoint_every=${CKPT:-300} --max-minutes ${TRAIN_MINUTES:-12} --val-prompts 10 \
  $flags > /tmp/pk/train-$name.log 2>&1 < /dev/null &
CHAIN
done
echo "wait" >> /tmp/pk/chain.sh
cat /tmp/pk/chain.sh
setsid nohup bash /tmp/pk/chain.sh > /tmp/pk/chain.log 2>&1 < /dev/null &
echo "chain started at ${SECONDS} s"
while [ "$SECONDS" -lt "${CALL_SECONDS:-540}" ]; do sleep 20; tail -c 200 "$(ls -t /tmp/pk/regen-*.log 2>/dev/null | head -n 1)" 2>/dev/null | tr '\r' '\n' | tail -n 1; done
cat /tmp/pk/data_stats.json 2>/dev/null
for n in $(cat /tmp/pk/runs.txt); do echo "== $n"; grep -a '^\[' "/tmp/pk/train-$n.log"; tail -c 300 "/tmp/pk/train-$n.log" | tr '\r' '\n' | tail -n 2; done
