#!/usr/bin/env bash
# CUDA vLLM on a GPU reached through a size-limited runner: park the bundle's parts, install, then run a stage of
# vllm_cuda_sweep.py (results/vllm_cuda_h200_sweep.json; docs/vllm-cuda-serving.md).
#
# The bundle (made here by make_vllm_bundle.sh): vLLM 0.26.0's wheel set for torch 2.11 + CUDA 13, the two largest
# wheels unpacked and recompressed with zstd (452 -> ~330 MB), the wheels the image lacks (gguf, MT-Bench, HumanEval,
# zstandard) and the target's GGUF, cut into 31 MB parts parts/vc.part-NN that ride one command each beside the tree.
#   commands 1..14: PARK_ONLY=1 bash lab/gpu/31_vllm_cuda.sh   carry parts/vc.part-NN  (each within 30 s)
#   command 15:     STAGE=sweep bash lab/gpu/31_vllm_cuda.sh   carry the last part: installs, starts the sweep
#   commands 16+:   bash lab/gpu/31_vllm_cuda.sh               (no carry) wait up to WAIT_S, bring back the summary
# $OUT/vllm_cuda_STAGE.json is rewritten as each configuration finishes; /tmp/vres keeps them for the next command.
set -uo pipefail
mkdir -p /tmp/vp
cp parts/vc.part-* /tmp/vp/ 2>/dev/null
echo "parked: $(ls /tmp/vp | grep -c part) parts"
[ "${PARK_ONLY:-0}" = 1 ] && exit 0
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 PEAGLE_GGUF=/tmp/vp/b/target.gguf PEAGLE_CACHE=/tmp/pcache
source lab/gpu/install_vllm_cuda.sh
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
# the sweep runs in its own process group (setsid), so it outlives this command; each following command (within 30 s)
# waits on it up to WAIT_S and brings back the summary so far
mkdir -p /tmp/vwork/out
if [ -n "${STAGE:-}" ] && ! pgrep -f vllm_cuda_sweep.py > /dev/null && [ ! -f /tmp/vwork/out/started ]; then
  setsid nohup python benchmarks/gpu/vllm_cuda_sweep.py "$STAGE" --out /tmp/vwork/out --budget-s "${BUDGET_S:-1500}" \
    --sets "${SETS:-mt-bench:80,humaneval:32}" --concurrency "${CONC:-1,4,16,64}" ${ONLY:+--only "$ONLY"} \
    > /tmp/vwork/driver.log 2>&1 < /dev/null &
  echo "sweep started"
fi
end=$((SECONDS + ${WAIT_S:-540}))
while [ $SECONDS -lt $end ] && pgrep -f vllm_cuda_sweep.py > /dev/null; do sleep 5; done
pgrep -f vllm_cuda_sweep.py > /dev/null && echo "sweep still running" || echo "sweep finished"
grep -v "INFO\|WARNING\|it/s\]" /tmp/vwork/driver.log | tail -n 60
cp /tmp/vwork/out/vllm_cuda_*.json "$OUT/" 2>/dev/null
tar czf "$OUT/server_logs.tgz" -C /tmp/vwork driver.log $(cd /tmp/vwork && ls server-*.log) 2>/dev/null
ls -la "$OUT"
