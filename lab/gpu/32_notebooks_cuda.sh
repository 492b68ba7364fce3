#!/usr/bin/env bash
# Notebooks 01-05 under nbmake on a CUDA GPU at CI sizes (PEAGLE_SMOKE=1, PEAGLE_DEVICE=cuda), then 01-04 again with
# the fp16 path a T4 takes (PEAGLE_HALF_DTYPE=float16; 05 too with NB_FP16_05=1), beside lab/dspark/levers.sh on the
# same GPU or alone (PIPELINE=target_only). LANES=2 runs the bf16 and fp16 lanes at once. Started by
# lab/dspark/gpu.sh (NOTEBOOKS=1) under setsid from its copy of the tree, after vLLM is installed from the bundle and
# parts/nbwheels (nbmake, ipykernel, plotly, ipywidgets as wheels for the image's Python, plus a ShareGPT stand-in)
# is parked in /tmp/vp/nbwheels. Notebook 05 waits for the regeneration's vLLM to finish (GPU memory); the
# gpt-oss-20b section skips (no network there). Writes /tmp/nbout: a log, a junit XML per notebook, the executed
# notebooks (.tgz).
set -uo pipefail
O=/tmp/nbout; mkdir -p $O
LOG=$O/notebooks_cuda.log
NBW=/tmp/vp/nbwheels
export PEAGLE_GGUF=/tmp/vp/b/target.gguf PEAGLE_CACHE=/tmp/nbcache PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD:$NBW/sharegpt_stub"
export PEAGLE_SMOKE=1 PEAGLE_SOLUTIONS=1 PEAGLE_DEVICE=cuda PEAGLE_GPU_NUM_PROMPTS=4 PEAGLE_GPU_TOKENS=128
export PEAGLE_GPU_MIN_FREE_GIB=100000
{
  python -m pip install -q --no-index --find-links "$NBW" nbmake plotly ipywidgets ipykernel
  python -m ipykernel install --prefix /tmp/nbjup --name peagle-lab --display-name "peagle-lab (CUDA)"
  python -m pip list 2>/dev/null | grep -iE "^(torch|triton|transformers|vllm|pytest|nbmake|nbclient|ipykernel|plotly|ipywidgets) "
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
} > "$LOG" 2>&1
export JUPYTER_PATH=/tmp/nbjup/share/jupyter
while [ ! -f /tmp/ds/target.done ]; do sleep 2; done           # the pipeline converts the target once
mkdir -p /tmp/nbcache/targets
for d in /tmp/pcache/targets/*; do [ -f "$d/config.json" ] && ln -sfn "$d" "/tmp/nbcache/targets/$(basename "$d")"; done
run() {   # run NAME NOTEBOOK [env ...]
  local name=$1 nb=$2; shift 2
  [ "$SECONDS" -lt "${NB_SECONDS:-1200}" ] || { echo "SKIPPED $name: NB_SECONDS reached" | tee -a "$LOG"; return; }
  env "$@" timeout -k 10 "${NB_TIMEOUT:-420}" python -m pytest -v -p no:cacheprovider --nbmake --nbmake-timeout=400 \
    --nbmake-kernel=peagle-lab --overwrite --durations=0 --tb=long --junitxml="$O/$name.xml" \
    "$nb" >> "$LOG" 2>&1
  echo "$name: pytest rc=$? at ${SECONDS} s" | tee -a "$LOG"
  cp "$nb" "$O/$name.ipynb"      # --overwrite: the executed notebook, outputs and all
}
wait_regen() { while [ ! -f /tmp/ds/regen.done ]; do sleep 2; done; }
lane_bf16() {
  for n in 01 02 03 04; do nb=$(ls notebooks/${n}_*.ipynb); run "${n}-bf16" "$nb" PEAGLE_HALF_DTYPE=; done
  wait_regen; run "05-bf16" notebooks/05_serving.ipynb PEAGLE_HALF_DTYPE=
}
lane_fp16() {
  for n in 01 02 03 04; do nb=$(ls notebooks/${n}_*.ipynb); run "${n}-fp16" "$nb" PEAGLE_HALF_DTYPE=float16; done
  [ "${NB_FP16_05:-0}" = 1 ] && { wait_regen; run "05-fp16" notebooks/05_serving.ipynb PEAGLE_HALF_DTYPE=float16; }
}
if [ "${LANES:-1}" = 2 ]; then
  # Two lanes at once, the fp16 one from its own copy of the tree and its own cache (notebook 03 writes a drafter).
  rm -rf /tmp/tree16 && cp -r "$PWD" /tmp/tree16
  mkdir -p /tmp/nbcache16 && cp -a /tmp/nbcache/targets /tmp/nbcache16/
  lane_bf16 &
  (cd /tmp/tree16 && export PYTHONPATH="/tmp/tree16:$NBW/sharegpt_stub" PEAGLE_CACHE=/tmp/nbcache16 && lane_fp16) &
  wait
else
  lane_bf16; lane_fp16
fi
grep -aE "rc=|SKIPPED|passed|failed" "$LOG" | tail -n 30
tar czf $O/notebooks_cuda.tgz -C $O $(cd $O && ls *.ipynb)
touch $O/done
