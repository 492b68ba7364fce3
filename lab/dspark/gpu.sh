#!/usr/bin/env bash
# The DSpark GPU run on a lent, size-limited GPU machine (lab plumbing: nothing here is for users).
#
#   PARK_ONLY=1 bash lab/dspark/gpu.sh     carry parts/vc.part-NN (+ parts/bundle-src): copies them to /tmp/vp
#   START=1     bash lab/dspark/gpu.sh     installs vLLM, starts lab/dspark/pipeline.sh under setsid, waits
#               bash lab/dspark/gpu.sh     waits up to WAIT_S more, brings back what is done
# pipeline.sh: regenerate (vLLM) -> train DSpark and its DFlash arm side by side -> replay eval -> CUDA vLLM serving.
set -uo pipefail
mkdir -p /tmp/vp
cp parts/vc.part-* /tmp/vp/ 2>/dev/null
cp parts/bundle-src/* /tmp/vp/ 2>/dev/null
echo "parked: $(ls /tmp/vp | grep -c part) parts; $(ls /tmp/vp)" | head -c 400; echo
[ "${PARK_ONLY:-0}" = 1 ] && exit 0
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 PEAGLE_GGUF=/tmp/vp/b/target.gguf PEAGLE_CACHE=/tmp/pcache
W=/tmp/ds
if [ "${START:-0}" = 1 ] && [ ! -f $W/started ]; then
  source "$(git ls-files | grep -m1 'install_vllm_cuda.sh$')" || exit 1
  mkdir -p $W && cp -r peagle_lab/drafters $W/shipped && touch $W/started
  setsid nohup bash lab/dspark/pipeline.sh > $W/pipeline.log 2>&1 < /dev/null &
  echo "pipeline started"
fi
end=$((SECONDS + ${WAIT_S:-540}))
while [ $SECONDS -lt $end ] && [ ! -f $W/done ]; do sleep 5; done
[ -f $W/done ] && echo "pipeline finished" || echo "pipeline still running"
grep -v "it/s\]\|INFO\|WARNING\|Warning" $W/pipeline.log | tail -n 40
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader
cp $W/*.json "$OUT/" 2>/dev/null
for d in dspark-smollm2 dflash-smollm2; do
  [ -f $W/$d/model.safetensors ] && tar czf "$OUT/$d.tgz" -C $W $d
done
tar czf "$OUT/logs.tgz" -C $W pipeline.log $(cd $W && ls *.log 2>/dev/null | grep -v pipeline) 2>/dev/null
ls -la "$OUT"
