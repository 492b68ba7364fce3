#!/usr/bin/env bash
# Notebooks 01-04 under nbmake on a GPU with device=cuda, at CI sizes (PEAGLE_SMOKE=1), on a machine with no
# network. Run after 06_park.sh has parked parts/gguf.part-00, parts/gguf.part-01 and parts/nbwheels (the
# notebook/nbmake wheels the GPU image lacks plus a 64-conversation ShareGPT stand-in; README.md says how to make
# it), one command each; this command carries parts/gguf.part-02 (parts/wheels parked by 06_park.sh).
# Reads /tmp/pk (the GGUF, the converted target and drafters in /tmp/pk/cache) and writes nothing there (it joins
# the GGUF only when missing, as 13_eval_gpu.sh does): notebook 03's data and run, and anything else a notebook
# caches, go to /tmp/nbcache, which links /tmp/pk/cache's entries in.
# Writes $OUT/notebooks_cuda_h200.log (install, versions, pytest -v with --durations=0), a junit XML per notebook
# and the executed notebooks (.tgz). NOTEBOOKS="02 03" runs some of them; NB_SECONDS (400): start no notebook after
# it; NB_TIMEOUT (240) bounds each; PEAGLE_GPU_* shrink 02's live CUDA benchmark.
#   bash lab/gpu/21_notebooks_cuda.sh
set -uxo pipefail
export PEAGLE_GGUF=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-/tmp/nbcache} PYTHONUNBUFFERED=1
NBW=/tmp/pk/nbwheels; [ -d "$NBW" ] || NBW=parts/nbwheels
NBW=$(cd "$NBW" && pwd)
# Absolute: nbmake starts each kernel in notebooks/, so PYTHONPATH=. would miss peagle_lab (and the notebooks'
# install cell would then try pip install from GitHub). The ShareGPT stand-in is found before any real one.
export PYTHONPATH="$PWD:$NBW/sharegpt_stub"
# Notebook parameters (peagle_lab/params.py: PEAGLE_<NAME> over the parameters cell, PEAGLE_SMOKE=1 = CI sizes).
# CI has no GPU, so its smoke sizes leave 02's live CUDA benchmark (gpu_ks x gpu_num_prompts x gpu_tokens) full size.
export PEAGLE_SMOKE=1 PEAGLE_SOLUTIONS=1 PEAGLE_DEVICE=cuda
export PEAGLE_GPU_NUM_PROMPTS=${PEAGLE_GPU_NUM_PROMPTS:-4} PEAGLE_GPU_TOKENS=${PEAGLE_GPU_TOKENS:-128}
LOG="$OUT/notebooks_cuda_h200.log"

{
  ls "$NBW"/*.whl | wc -l
  # Resolved from $NBW alone; what the image already has (pytest, pygments, packaging, ...) is kept as it is.
  python -m pip install -q --no-index --find-links "$NBW" nbmake plotly ipywidgets
  bash lab/gpu/install_wheels.sh   # gguf, accelerate, MT-Bench prompts
  python -m ipykernel install --prefix /tmp/nbjup --name peagle-lab --display-name "peagle-lab (H200)"
  python -m pip list 2>/dev/null | grep -iE "^(torch|triton|transformers|pytest|nbmake|nbclient|ipykernel|ipython|plotly|ipywidgets|gguf) "
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
} > "$LOG" 2>&1
tail -n 4 "$LOG"
export JUPYTER_PATH=/tmp/nbjup/share/jupyter
bash lab/gpu/join_gguf.sh || exit 1
mkdir -p /tmp/nbcache/targets /tmp/nbcache/drafters
for d in /tmp/pk/cache/targets/* /tmp/pk/cache/drafters/*; do
  [ -f "$d/config.json" ] && ln -sfn "$d" "/tmp/nbcache/$(basename "$(dirname "$d")")/$(basename "$d")"
done
ls -l /tmp/nbcache/targets /tmp/nbcache/drafters

# One pytest per notebook, so a failure's traceback is logged before the next one starts (one pytest over all
# four can reach its time limit inside a notebook and lose the tracebacks of those before it).
# NOTEBOOKS="02" runs some of them.
for nb in $(for n in ${NOTEBOOKS:-01 02 03 04}; do ls notebooks/${n}_*.ipynb; done); do
  [ "$SECONDS" -lt "${NB_SECONDS:-400}" ] || { echo "SKIPPED $nb: NB_SECONDS=${NB_SECONDS:-400} reached" | tee -a "$LOG"; continue; }
  timeout -k 10 "${NB_TIMEOUT:-240}" python -m pytest -v -p no:cacheprovider --nbmake --nbmake-timeout=230 \
    --nbmake-kernel=peagle-lab --overwrite --durations=0 --tb=long --junitxml="$OUT/$(basename "$nb" .ipynb).xml" "$nb" >> "$LOG" 2>&1
  echo "$nb: pytest rc=$? at ${SECONDS} s" | tee -a "$LOG"
done
grep -aE "PASSED|FAILED|ERROR|passed|failed|[0-9.]+s call" "$LOG" | tail -n 16
tar czf "$OUT/notebooks_cuda_h200.tgz" $(for n in ${NOTEBOOKS:-01 02 03 04}; do ls notebooks/${n}_*.ipynb; done) && ls -l "$OUT"
echo "done at ${SECONDS} s"
