#!/usr/bin/env bash
# Drafter training under torchrun (DDP) on two GPUs over NCCL, against one GPU. The same command serves every
# step of the sequence; what it does depends on what it carries and on what is already parked in $PK (/tmp/pk):
#   1. carry parts/gguf.part-00: parks it, then the DDP tests on CUDA (tests/test_trainer.py -k "two_process or
#      init_distributed": one step's all-reduced gradients on 2 processes == the one-process gradient of the same
#      global batch, and 4 steps of 2 processes == 4 steps of one): with 2+ GPUs over NCCL (a GPU per process) and
#      again as two processes sharing GPU 0 over gloo; with one GPU the gloo run alone. 2-4 minutes.
#      Back: tests-*.log and grad_oracle.jsonl (the measured gradient differences).
#   2. carry parts/gguf.part-01: parks it (and runs the tests if they have not run on this machine). Seconds.
#   3. carry parts/gguf.part-02 parts/wheels/gguf-0.19.0-py3-none-any.whl (the tree + one GGUF part leave ~1.7 MB
#      of the 64 MiB: not the whole parts/wheels): joins and converts the target, then trains the P-EAGLE recipe on
#      the regenerated data in lab/gpu/data/recipe_greedy_4119.tgz (data/greedy + gC + gD, 4,119 samples; gB
#      is the unused 512) for STEPS (300) steps of 32 conversations, checkpoints every STEPS/2:
#        a. on one GPU (one process);
#        b. torchrun --nproc-per-node 2 (NCCL, a GPU each), stopped after STEPS/2 (--stop-after; rank 0 writes the
#           checkpoint), then
#        c. the same command again: resumes from that checkpoint on 2 GPUs and runs to STEPS.
#      With one GPU, b and c run as two gloo processes sharing it (PEAGLE_DIST_BACKEND=gloo: the DDP code path and
#      resume, no scaling figure) and the two-GPU command is printed and recorded as not run.
#      Back: ddp_<N>gpu.json (loss curves, steps/s, scaling efficiency, peak memory per GPU, resume, the tests'
#      gradient figures) and ddp_logs.tgz. Stays within CALL_S (535 s) with per-leg timeouts.
# Run the three within 30 s of each other (an idle machine is given back) and all on one machine kind:
# nvidia-h200-x2 where it is offered, else nvidia-h200 (another kind starts a bare machine without the parked parts).
#   bash lab/gpu/30_ddp.sh
# STAGE=tests|train forces a stage; STEPS, BATCH, MAX_LEN, LEG1_S, LEG2_S, CALL_S tune the training step. A dry run
# of step 3 on a CPU (no GGUF parts): PK=/tmp/ddp-dry PEAGLE_GGUF=<the local .gguf> PEAGLE_CACHE=~/.cache/peagle-lab
# STAGE=train DEVICE=cpu STEPS=4 BATCH=2 MAX_LEN=128 bash lab/gpu/30_ddp.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1   # the machine's rule: no NVLink multicast
PK=${PK:-/tmp/pk}                                          # where parts are parked (another folder: a dry run on a CPU)
export PEAGLE_GGUF=${PEAGLE_GGUF:-$PK/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-$PK/cache}
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-$PK/out}
W=$PK/ddp
mkdir -p "$PK" "$W" "$OUT"
STEPS=${STEPS:-300}; HALF=$((STEPS / 2)); BATCH=${BATCH:-32}; MAX_LEN=${MAX_LEN:-1024}; CALL_S=${CALL_S:-535}
DEVICE=${DEVICE:-cuda}                                     # cpu: a dry run of the training call without a GPU
NGPU=$(python -c 'import torch; print(torch.cuda.device_count())')
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | head -n 8
echo "GPUs visible: $NGPU"
for f in parts/gguf.part-0*; do [ -f "$f" ] && cp "$f" "$PK/"; done
ls -la "$PK" | grep -a gguf
STAGE=${STAGE:-auto}
if [ "$STAGE" = auto ]; then
  STAGE=tests
  [ -f "$PEAGLE_GGUF" ] || { [ -f "$PK/gguf.part-00" ] && [ -f "$PK/gguf.part-01" ] && [ -f "$PK/gguf.part-02" ]; } && STAGE=train
fi
echo "stage: $STAGE"

# ------------------------------------------------------------------ the DDP tests on CUDA (steps 1-2)
run_tests() {                       # LABEL [VAR=value ...]
  local label=$1; shift
  env "$@" PEAGLE_TEST_DEVICE=cuda PEAGLE_DDP_REPORT="$W/grad_oracle.jsonl" timeout "${TEST_S:-230}" \
    python -m pytest -q -p no:cacheprovider -rA --durations=5 tests/test_trainer.py -k "two_process or init_distributed" \
    > "$W/tests-$label.log" 2>&1
  echo "$label rc=$?" | tee -a "$W/tests.rc"
  tail -n 14 "$W/tests-$label.log"
}
if [ "$STAGE" = tests ]; then
  if [ -f "$W/tests.done" ]; then
    echo "tests already ran on this machine:"; cat "$W/tests.rc"
  else
    rm -f "$W/grad_oracle.jsonl" "$W/tests.rc"
    if [ "$NGPU" -ge 2 ]; then
      run_tests nccl-2gpu CUDA_VISIBLE_DEVICES=0,1            # NCCL, a GPU per process (the test's default with 2 GPUs)
      run_tests gloo-1gpu CUDA_VISIBLE_DEVICES=0              # two processes on one GPU: the test picks gloo
    else
      run_tests gloo-1gpu
    fi
    touch "$W/tests.done"
  fi
  cp "$W"/tests-*.log "$W/tests.rc" "$OUT/" 2>/dev/null; cp "$W/grad_oracle.jsonl" "$OUT/" 2>/dev/null
  cat "$W/grad_oracle.jsonl" 2>/dev/null
  echo "done at ${SECONDS} s"
  exit 0
fi

# ------------------------------------------------------------------ training legs (step 3)
bash lab/gpu/install_wheels.sh
[ -f "$PEAGLE_GGUF" ] || cat "$PK/gguf.part-00" "$PK/gguf.part-01" "$PK/gguf.part-02" > "$PEAGLE_GGUF"
python -c "from peagle_lab.assets import resolve_target; print(resolve_target(None))" 2>&1 | tail -n 1
echo "target ready at ${SECONDS} s"
rm -rf "$W/data" "$W/mix" "$W"/run-* "$W"/export-* "$W/legs.jsonl" "$W/ckpt_after_stop.json"
tar xzf lab/gpu/data/recipe_greedy_4119.tgz -C "$W" && mkdir -p "$W/mix"
for d in greedy gC gD; do for f in "$W"/data/$d/shard-*.pt; do b=$(basename "$f"); ln -sf "$f" "$W/mix/shard-$d-${b#shard-}"; done; done
ls "$W/mix" | wc -l

P="--method peagle --num-layers 4 --set intermediate_size=384 --set share_lm_head=true --set max_depth=8 --set cod_ratio=0.8 --set hidden_noise=0.05"
T="--set group_by_length=true --data $W/mix --device $DEVICE --batch-size $BATCH --max-len $MAX_LEN --steps $STEPS --set warmup_steps=100 --lr 1e-3 --set checkpoint_every=$HALF"
ONE="python -m peagle_lab train $P $T --out $W/run-1gpu --export $W/export-1gpu"
TWO="python -m torch.distributed.run --standalone --nproc-per-node 2 -m peagle_lab train $P $T --out $W/run-2proc --export $W/export-2proc"
left() { echo $(( CALL_S - 15 - SECONDS )); }              # seconds left for a leg (15 s kept for the summary)
leg() {                                                    # NAME TIMEOUT_S COMMAND...
  local name=$1 t=$2; shift 2
  [ "$t" -gt 30 ] || { echo "{\"leg\": \"$name\", \"rc\": null, \"skipped\": \"no time left\"}" >> "$W/legs.jsonl"; return; }
  local s; s=$(date +%s.%N)
  echo "== $name (timeout $t s): $*"
  OMP_NUM_THREADS=4 timeout "$t" "$@" > "$W/train-$name.log" 2>&1 < /dev/null
  local rc=$?
  echo "{\"leg\": \"$name\", \"rc\": $rc, \"timeout_s\": $t, \"wall_s\": $(python -c "print(round($(date +%s.%N) - $s, 1))")}" | tee -a "$W/legs.jsonl"
  grep -a '^\[' "$W/train-$name.log" | head -n 8; tail -c 600 "$W/train-$name.log" | tr '\r' '\n' | grep -av '^\s*$' | tail -n 3
}
min() { [ "$1" -lt "$2" ] && echo "$1" || echo "$2"; }

leg 1gpu "$(min "${LEG1_S:-190}" "$(left)")" env CUDA_VISIBLE_DEVICES=0 $ONE
if [ "$NGPU" -ge 2 ]; then
  MODE=nccl-2gpu; DDP="env CUDA_VISIBLE_DEVICES=0,1"
else
  MODE=gloo-1gpu; DDP="env PEAGLE_DIST_BACKEND=gloo"
  echo "NOT RUN (one GPU visible): torchrun --standalone --nproc-per-node 2 -m peagle_lab train $P $T --out $W/run-2gpu --stop-after $HALF; then the same without --stop-after (resume)"
fi
leg 2proc-stop "$(min "${LEG2_S:-140}" "$(left)")" $DDP $TWO --stop-after "$HALF"
python -c "import json, torch; s = torch.load('$W/run-2proc/checkpoint.pt', map_location='cpu', weights_only=False); \
print(json.dumps({'step': s['step'], 'rows': len(s['history'])}))" > "$W/ckpt_after_stop.json" 2>&1
ls -la "$W/run-2proc" >> "$W/ckpt_after_stop.txt" 2>&1; cat "$W/ckpt_after_stop.json"
leg 2proc-resume "$(min "${LEG2_S:-140}" "$(left)")" $DDP $TWO

# ------------------------------------------------------------------ the record
export W STEPS HALF BATCH NGPU MODE P T ONE TWO
python - > "$OUT/ddp_${NGPU}gpu.json" <<'PY'
import glob, json, os, re, statistics
from pathlib import Path
import torch

W, steps, half, ngpu, mode = Path(os.environ["W"]), int(os.environ["STEPS"]), int(os.environ["HALF"]), int(os.environ["NGPU"]), os.environ["MODE"]

def load(run):
    p = W / run / "checkpoint.pt"
    return torch.load(p, map_location="cpu", weights_only=False) if p.exists() else None

def median_step_s(hist, starts):                 # drop each launch's first 5 steps (start-up, first allocations)
    xs = [r["seconds"] for r in hist if not any(s < r["step"] <= s + 5 for s in starts)]
    return statistics.median(xs) if xs else None

def log_lines(name):
    p = W / f"train-{name}.log"
    return p.read_text(errors="replace") if p.exists() else ""

one, two = load("run-1gpu"), load("run-2proc")
legs = [json.loads(x) for x in (W / "legs.jsonl").read_text().splitlines()] if (W / "legs.jsonl").exists() else []
rec = {
    "what": "issue 20: P-EAGLE recipe under torchrun DDP (2 processes) vs one GPU, same steps and data; stop + resume on 2 processes",
    "script": "lab/gpu/30_ddp.sh (step 3; steps 1-2 parked the GGUF and ran the DDP tests on CUDA)",
    "machine": {"gpus": ngpu, "names": [torch.cuda.get_device_name(i) for i in range(ngpu)], "torch": torch.__version__,
                "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())) if ngpu else None},
    "mode": mode,
    "two_gpu": "run" if ngpu >= 2 else "NOT RUN: one GPU visible; the 2-process legs ran as 2 gloo processes sharing it",
    "two_gpu_command": "CUDA_VISIBLE_DEVICES=0,1 " + os.environ["TWO"] + f" --stop-after {half}; then the same without --stop-after",
    "commands": {"one_gpu": "CUDA_VISIBLE_DEVICES=0 " + os.environ["ONE"],
                 "two_proc_stop": os.environ["TWO"] + f" --stop-after {half}", "two_proc_resume": os.environ["TWO"],
                 "env": "PEAGLE_DIST_BACKEND=gloo" if ngpu < 2 else "CUDA_VISIBLE_DEVICES=0,1 (NCCL)"},
    "steps": steps, "global_batch": int(os.environ["BATCH"]),
    "samples": int((re.findall(r"(\d+) conversations loaded", log_lines("1gpu")) or [0])[0]) or None,
    "legs": legs,
}
if (W / "ckpt_after_stop.json").exists():
    try:
        rec["checkpoint_after_stop"] = json.loads((W / "ckpt_after_stop.json").read_text())
    except ValueError:
        rec["checkpoint_after_stop"] = (W / "ckpt_after_stop.json").read_text()[-500:]
    rec["run_dir_after_stop"] = (W / "ckpt_after_stop.txt").read_text() if (W / "ckpt_after_stop.txt").exists() else None
for name, ck, starts in (("one_gpu", one, [0]), ("two_proc", two, [0, half])):
    if ck is None:
        rec[name] = None
        continue
    h = ck["history"]
    s = median_step_s(h, starts)
    rec[name] = {"final_step": ck["step"], "steps_logged": [h[0]["step"], h[-1]["step"]] if h else None,
                 "contiguous": [r["step"] for r in h] == list(range(1, len(h) + 1)),
                 "median_step_s": s, "steps_per_s": 1 / s if s else None,
                 "samples_per_s": int(os.environ["BATCH"]) / s if s else None,
                 "peak_gib": [{"step": r["step"], "gib": r.get("peak_gib"), "per_rank": r.get("peak_gib_per_rank")}
                              for r in h if "peak_gib" in r],
                 "loss": [round(r["loss"], 5) for r in h],
                 "acc_per_depth_last": h[-1]["acc_per_depth"] if h else None,
                 "seconds": [round(r["seconds"], 4) for r in h]}
if one and two:
    a = {r["step"]: r["loss"] for r in one["history"]}
    b = {r["step"]: r["loss"] for r in two["history"]}
    common = sorted(set(a) & set(b))
    d = [b[k] - a[k] for k in common]
    la = [a[k] for k in common]
    jitter = statistics.pstdev([y - x for x, y in zip(la, la[1:])]) / 2 ** 0.5 if len(la) > 2 else None
    tail = common[-50:]
    rec["comparison"] = {
        "steps_compared": len(common),
        "max_abs_diff_first_10": max(abs(x) for x in d[:10]) if d else None,
        "mean_abs_diff": statistics.fmean(abs(x) for x in d) if d else None,
        "max_abs_diff": max(abs(x) for x in d) if d else None,
        "batch_to_batch_noise": jitter,
        "mean_last_50": [statistics.fmean(a[k] for k in tail), statistics.fmean(b[k] for k in tail)] if tail else None,
        "first_step_after_resume": {"step": half + 1, "one_gpu": a.get(half + 1), "two_proc": b.get(half + 1)},
        "within_noise": bool(d and jitter and statistics.fmean(abs(x) for x in d) < jitter),
    }
    s1, s2 = rec["one_gpu"]["median_step_s"], rec["two_proc"]["median_step_s"]
    if s1 and s2:
        rec["comparison"]["speedup"] = s1 / s2
        rec["comparison"]["scaling_efficiency"] = s1 / (2 * s2) if ngpu >= 2 else None
oracle = W / "grad_oracle.jsonl"
rec["tests"] = {"rc": (W / "tests.rc").read_text().split("\n") if (W / "tests.rc").exists() else "not run on this machine",
                "grad_oracle": [json.loads(x) for x in oracle.read_text().splitlines()] if oracle.exists() else []}
print(json.dumps(rec, indent=1))
PY
python -c "import json; d = json.load(open('$OUT/ddp_${NGPU}gpu.json')); print(json.dumps({k: d.get(k) for k in ('mode', 'two_gpu', 'legs', 'checkpoint_after_stop', 'comparison')}, indent=1)); \
print({k: (d[k] or {}).get('peak_gib') for k in ('one_gpu', 'two_proc')})"
tar czf "$OUT/ddp_logs.tgz" -C "$W" $(cd "$W" && ls train-*.log tests-*.log tests.rc legs.jsonl grad_oracle.jsonl ckpt_after_stop.* 2>/dev/null)
ls -la "$OUT"
echo "done at ${SECONDS} s"
