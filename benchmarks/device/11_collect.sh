#!/usr/bin/env bash
# The call after 10_train.sh: wait (up to WAIT_SECONDS) until every run in /tmp/pk/runs.txt has exported, then bring
# back the drafters and logs. A run still going is stopped and exported from its last checkpoint by 08_collect.sh's
# method (resume ignores --steps; --steps 1 exports at once) -- run that by hand if it comes to it.
set -uxo pipefail
RUNS=$(cat /tmp/pk/runs.txt)
limit=${WAIT_SECONDS:-480}
while [ "$SECONDS" -lt "$limit" ]; do
  done_all=1
  for r in $RUNS; do [ -f "/tmp/pk/${r%%:*}/training.json" ] || done_all=0; done
  [ $done_all = 1 ] && break
  sleep 5
done
echo "waited ${SECONDS} s"
for r in $RUNS; do
  name=${r%%:*}
  cp "/tmp/pk/train-$name.log" "$OUT/"
  grep -a '^\[' "/tmp/pk/train-$name.log"; tail -c 500 "/tmp/pk/train-$name.log"; echo
  [ -f "/tmp/pk/$name/training.json" ] && tar czf "$OUT/$name.tgz" -C /tmp/pk "$name"
done
ls -la "$OUT"
