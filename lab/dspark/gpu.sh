#!/usr/bin/env bash
# The DSpark GPU runs on a lent, size-limited GPU machine (lab plumbing: nothing here is for users).
#
#   PARK_ONLY=1 bash lab/dspark/gpu.sh     carry parts/vc.part-NN (+ parts/bundle-src, parts/nbwheels): copies to /tmp/vp
#   START=1     bash lab/dspark/gpu.sh     installs vLLM (NO_VLLM=1: unpacks parts/nbg.part-NN instead), copies the tree to /tmp/tree, starts the pipeline there under
#                                          setsid (PIPELINE=pipeline|levers) and, with NOTEBOOKS=1,
#                                          lab/gpu/32_notebooks_cuda.sh beside it; waits
#               bash lab/dspark/gpu.sh     waits up to WAIT_S more, brings back what is done
# pipeline.sh: regenerate (vLLM) -> train DSpark and its DFlash arm side by side -> replay eval -> CUDA vLLM serving.
# levers.sh:   regenerate -> fine-tune the shipped DSpark two ways side by side -> replay eval.
set -uo pipefail
mkdir -p /tmp/vp
cp parts/vc.part-* /tmp/vp/ 2>/dev/null
cp parts/bundle-src/* /tmp/vp/ 2>/dev/null
[ -d parts/nbwheels ] && cp -r parts/nbwheels /tmp/vp/
cp parts/nbg.part-* /tmp/vp/ 2>/dev/null      # NO_VLLM=1: the target's GGUF, its few wheels and nbwheels only
echo "parked: $(ls /tmp/vp | grep -c part) parts; $(ls /tmp/vp)" | head -c 400; echo
[ "${PARK_ONLY:-0}" = 1 ] && exit 0
export PYTHONPATH=/tmp/tree PYTHONUNBUFFERED=1 PEAGLE_GGUF=/tmp/vp/b/target.gguf PEAGLE_CACHE=/tmp/pcache
W=/tmp/ds
if [ "${START:-0}" = 1 ] && [ ! -f $W/started ]; then
  if [ "${NO_VLLM:-0}" = 1 ]; then
    cat /tmp/vp/nbg.part-* | tar xf - -C /tmp/vp || exit 1
    python -m pip install -q --no-deps --no-index /tmp/vp/b/wheels/*.whl || exit 1
  else
    source lab/gpu/install_vllm_cuda.sh || exit 1
  fi
  mkdir -p $W /tmp/tree && tar cf - --exclude=./parts . | tar xf - -C /tmp/tree
  cp -r peagle_lab/drafters $W/shipped && touch $W/started
  (cd /tmp/tree && setsid nohup bash lab/dspark/${PIPELINE:-pipeline}.sh > $W/pipeline.log 2>&1 < /dev/null &)
  if [ "${NOTEBOOKS:-0}" = 1 ]; then
    (cd /tmp/tree && setsid nohup bash lab/gpu/32_notebooks_cuda.sh > $W/notebooks.log 2>&1 < /dev/null &)
  fi
  echo "pipeline started"
fi
end=$((SECONDS + ${WAIT_S:-540}))
while [ $SECONDS -lt $end ] && { [ ! -f $W/done ] || { [ -f $W/notebooks.log ] && [ ! -f /tmp/nbout/done ]; }; }; do
  sleep 5
done
[ -f $W/done ] && echo "pipeline finished" || echo "pipeline still running"
grep -v "it/s\]\|INFO\|WARNING\|Warning" $W/pipeline.log | tail -n 30
[ -f $W/notebooks.log ] && { grep -aE "rc=|SKIPPED" /tmp/nbout/notebooks_cuda.log; tail -n 3 $W/notebooks.log; }
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader
cp $W/*.json "$OUT/" 2>/dev/null
for d in dspark-smollm2 dflash-smollm2 dspark-more dspark-dense; do
  [ -f $W/$d/model.safetensors ] && tar czf "$OUT/$d.tgz" -C $W $d
done
[ -d /tmp/dswork ] && tar czf "$OUT/dswork.tgz" -C /tmp/dswork --exclude='*.log' --exclude='*.jsonl' . 2>/dev/null
tar czf "$OUT/logs.tgz" -C $W $(cd $W && ls *.log 2>/dev/null) $(cd $W && ls -d run-*/*.json 2>/dev/null) 2>/dev/null
[ -d /tmp/nbout ] && tar czf "$OUT/notebooks.tgz" -C /tmp/nbout . 2>/dev/null
ls -la "$OUT"
