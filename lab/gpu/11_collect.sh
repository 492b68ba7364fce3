#!/usr/bin/env bash
# Run after 10_train.sh or 20_recipe.sh: wait (up to WAIT_SECONDS, default 480) until every run in /tmp/pk/runs.txt
# has exported, then bring back the drafters (archives over 16 MiB in 15 MiB parts: join them with
# `cat NAME.tgz.part-* > NAME.tgz`) and the logs. Run it again, each within 30 s of the last, until all runs have
# exported. A run still going can be stopped and exported from its last checkpoint by hand
# (`git show 577158b:benchmarks/device/08_collect.sh` shows how).
#   ONLY="a b"          bring back just those runs (a command returns at most 8 files: two commands for six drafters)
#   DATA_BACK="t07a"    also bring back those regenerated data folders (15 MiB parts), to train on them again
#   WAIT_SECONDS=570 bash lab/gpu/11_collect.sh
set -uxo pipefail
RUNS=$(cat /tmp/pk/runs.txt)
WANT=${ONLY:-$RUNS}
limit=${WAIT_SECONDS:-480}
while [ "$SECONDS" -lt "$limit" ]; do
  done_all=1
  for r in $RUNS; do [ -f "/tmp/pk/${r%%:*}/training.json" ] || done_all=0; done
  [ $done_all = 1 ] && break
  sleep 5
done
echo "waited ${SECONDS} s"
logs=()
for f in data_stats.json chain.log regen-greedy.log regen-t07a.log regen-t07b.log; do [ -f "/tmp/pk/$f" ] && logs+=("$f"); done
for r in $WANT; do
  name=${r%%:*}
  logs+=("train-$name.log")
  grep -a '^\[' "/tmp/pk/train-$name.log"; tail -c 500 "/tmp/pk/train-$name.log"; echo
  # Archives over the device's 16 MiB return limit (drafters above the shipping cap) come back in 15 MiB parts:
  # join them with `cat NAME.tgz.part-* > NAME.tgz`.
  [ -f "/tmp/pk/$name/training.json" ] && tar czf "/tmp/pk/$name.tgz" -C /tmp/pk "$name" \
    && split -b 15m -d "/tmp/pk/$name.tgz" "$OUT/$name.tgz.part-"
done
tar czf "$OUT/logs.tgz" -C /tmp/pk "${logs[@]}"
# DATA_BACK="t07a t07b": also bring back those regenerated data folders (15 MiB parts), to train on them again later
if [ -n "${DATA_BACK:-}" ]; then
  tar czf /tmp/pk/data_back.tgz -C /tmp/pk $(for d in $DATA_BACK; do [ -d "/tmp/pk/data/$d" ] && echo "data/$d"; done) \
    && split -b 15m -d /tmp/pk/data_back.tgz "$OUT/data_back.tgz.part-"
fi
ls -la "$OUT"
