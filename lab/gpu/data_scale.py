"""The data-scaling run on one GPU: regenerate with CUDA vLLM, train both drafters once over the data, replay.

Three stages, one process (start it under ``setsid``; benchmarks/gpu/data_scale.sh does), each bounded in time:

1. ``regen``: the same 512 ShareGPT first turns answered by transformers' ``generate`` and by vLLM's offline
   engine (the throughput A/B), then every human turn of ShareGPT conversations answered turn by turn by vLLM
   at T=0.7 until ``--regen-s`` runs out (shards are written whole, so stopping it loses only the turn in flight).
2. ``train``: P-EAGLE and EAGLE-3 side by side on all the data, one pass (no sample seen twice), the cosine fitted
   to ``--train-s``; each exports a drafter whenever the reply tokens it has seen pass a milestone, so each
   milestone is the drafter "trained on N reply tokens".
3. ``eval``: every export and the shipped pair replayed on the same greedy replies to 80 MT-Bench prompts at
   K = 3, 5, 7 (as benchmarks/ablation_eval.py does). With ``eval`` among the stages, ``train`` and ``stream``
   start ``eval-live`` beside the trainers: each export is replayed as it lands, and ``eval`` replays only what
   is left.

``stream`` runs 1 and 2 at once on the one GPU: both trainers read turn files as the engines write them (a 135M
target leaves vLLM host-bound, so the GPU has room), one pass over a pool that grows behind them, then the fresh
data is packed as soon as the engines stop. ``unpack``/``pack`` carry data between machines; ``serve`` runs the
newest P-EAGLE export in CUDA vLLM; ``collect`` (on the CPU, afterwards) writes the curve and ``record`` an
allocation's raw record.

Everything lands in ``--out``: ``data_scaling.json`` (rewritten as rows arrive), ``regen_throughput.json``, logs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

MILESTONES_M = (2, 5, 10, 20, 35, 50, 75, 100)      # reply tokens seen, millions
EXPORT_NAME = re.compile(r"(peagle|eagle)-\d+\.\dM")   # what the trainers' exports are called (peagle-2.0M)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def write_json(obj, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.replace(path)


def shard_tokens(folder: Path) -> tuple[int, int, int]:
    """(samples, tokens, reply tokens) in a regenerate folder's shards."""
    import torch

    n = tok = rep = 0
    for p in sorted(folder.glob("shard-*.pt")):
        for s in torch.load(p, weights_only=True):
            n += 1
            tok += s["ids"].numel()
            rep += s["ids"].numel() - int(s["prompt_len"])
    return n, tok, rep


DEVICE, MAX_NEW = "cuda", 256


def regenerate_cmd(out: Path, engine: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "peagle_lab", "regenerate", "--engine", engine, "--prompts", "sharegpt",
            "--device", DEVICE, "--dtype", "bfloat16" if DEVICE == "cuda" else "float32",
            "--max-new-tokens", str(MAX_NEW), "--out", str(out), *extra]


def run_timed(cmd: list[str], log_path: Path, limit_s: float) -> tuple[int, float, str]:
    t = time.perf_counter()
    rc = stop_at([launch(cmd, log_path)], t + limit_s)[0]
    return rc, time.perf_counter() - t, log_path.read_text(errors="replace")


def tok_per_s(text: str) -> dict:
    m = re.search(r"wrote (\d+) reply tokens in ([\d.]+) s of generation = ([\d.]+) tok/s", text)
    return {"reply_tokens": int(m[1]), "generate_s": float(m[2]), "tokens_per_s": float(m[3])} if m else {}


def launch(cmd: list[str], log_path: Path) -> subprocess.Popen:
    """Start ``cmd`` in its own process group (killed whole on a deadline), its output in ``log_path``."""
    return subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=os.environ.get("PEAGLE_FROZEN") or None)    # -m peagle_lab: that copy


def stop_at(procs: list[subprocess.Popen], deadline: float) -> list[int]:
    """Wait for every process until ``deadline`` (perf_counter), then end the rest's groups; their exit codes."""
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return [p.returncode for p in procs]


def stage_ab(args, out: Path) -> dict:
    """The same ``--ab-prompts`` ShareGPT first turns through transformers and vLLM (skipped when 0)."""
    work = Path(args.work)
    ab = {"prompts": f"the first {args.ab_prompts} ShareGPT first turns", "max_new_tokens": MAX_NEW,
          "dtype": "bfloat16", "temperature": 0.0}
    old = out / "regen_throughput.json"
    if old.exists():                                     # a rerun keeps the engines already measured
        kept = json.loads(old.read_text()).get("ab", {})
        ab.update({k: v for k, v in kept.items() if isinstance(v, dict) and v.get("rc") == 0})
    for engine, batch in (("transformers", min(256, args.ab_prompts)), ("vllm", args.ab_prompts)):
        if engine in ab or not args.ab_prompts:
            continue
        rc, wall, text = run_timed(regenerate_cmd(work / f"ab-{engine}", engine,
                                                  ["--num-prompts", str(args.ab_prompts), "--batch-size", str(batch)]),
                                   out / f"ab_{engine}.log", 300)
        ab[engine] = {"batch_size": int(batch), "rc": rc, "wall_s": round(wall, 1), **tok_per_s(text)}
        log(f"A/B {engine}: {ab[engine]}")
        write_json({"ab": ab}, out / "regen_throughput.json")
    return ab


def folder_record(data: Path) -> dict:
    """Samples, tokens and the steady reply-token rate of one regenerate folder (shard files by write time)."""
    n, tok, rep = shard_tokens(data)
    files = sorted(data.glob("shard-*.pt"), key=lambda f: f.stat().st_mtime)
    span = (files[-1].stat().st_mtime - files[0].stat().st_mtime) if len(files) > 1 else 0.0
    first = shard_tokens_one(files[0]) if files else 0
    return {"samples": n, "tokens": tok, "reply_tokens": rep, "shard_files": len(files),
            "first_write": files[0].stat().st_mtime if files else None,
            "last_write": files[-1].stat().st_mtime if files else None,
            "steady_reply_tokens_per_s": round((rep - first) / span, 1) if span else None}


def watch(cmds: list[list[str]], logs: list[Path], deadline: float, *, relaunch_s: float = 150.0,
          tries: int = 3) -> list[int]:
    """Run every command until ``deadline``, starting again (resuming its folder) any that exits with an error
    while at least ``relaunch_s`` remain, ``tries`` starts in all: one engine that fails to start must not cost
    the stage its share."""
    procs = [launch(c, lg) for c, lg in zip(cmds, logs)]
    starts = [1] * len(procs)
    try:
        while time.perf_counter() < deadline:
            for i, p in enumerate(procs):
                if p.poll() not in (None, 0) and deadline - time.perf_counter() > relaunch_s and starts[i] < tries:
                    starts[i] += 1
                    log(f"{logs[i].name}: exited with {p.returncode}; starting it again")
                    logs[i].rename(logs[i].with_suffix(f".failed{time.time_ns()}.log"))
                    procs[i] = launch(cmds[i], logs[i])
            if all(p.poll() is not None for p in procs):
                break
            time.sleep(1)
    except BaseException:          # whatever broke here, no engine outlives the stage: regen.done follows it, and
        stop_at(procs, time.perf_counter())     # the trainers take the engines' memory back once that is there
        raise
    return stop_at(procs, deadline)


def stage_regen(args, out: Path, beside: bool = False) -> None:
    """Whole ShareGPT conversations answered turn by turn at T=0.7 by ``len(--slices)`` vLLM engines at once, each
    over its own slice of conversations with its own seed, on one GPU (a 135M target leaves vLLM host-bound, so
    engines side by side add up), until ``--regen-s`` runs out. Turn files are written whole: a stop loses only
    the turn in flight. Each engine has a fixed KV cache (``--kv-cache-gib``), so vLLM skips the free-memory
    profiling that another GPU process starting or stopping would break: all start at once. Its size comes from
    :func:`memory_plan` (``beside``: the trainers of stage ``stream`` share the GPU) unless given."""
    work, kv = Path(args.work), plan_for(args, "stream" if beside else "regen")["kv_gib"]
    t_ab = time.perf_counter()
    ab = stage_ab(args, out)
    slices = [tuple(int(x) for x in s.split(":")) for s in args.slices.split(",")]
    budget = args.regen_s - (time.perf_counter() - t_ab)        # the A/B made now counts, one kept from before not
    share = round(args.gpu_memory / len(slices), 3)
    cmds, logs, t0 = [], [], time.perf_counter()
    for i, (a, b) in enumerate(slices):
        extra = ["--all-turns", "--skip-prompts", str(a), "--num-prompts", str(b - a), "--temperature", "0.7",
                 "--seed", str(args.seed + i), "--max-prompt-tokens", "640", "--batch-size", str(args.vllm_batch),
                 "--shard-size", str(args.shard_size), "--gpu-memory-utilization", str(share),
                 "--kv-cache-gib", str(kv)]
        cmds.append(regenerate_cmd(work / f"data-{i}", "vllm", extra))
        logs.append(out / f"regen_{i}.log")
    log(f"{len(cmds)} regenerations for {budget:.0f} s, {kv} GiB of KV cache each")
    rcs = watch(cmds, logs, t0 + max(60.0, budget))
    wall = time.perf_counter() - t0
    engines = [{"command": " ".join(c[1:]), "rc": rc, "conversations": f"{a}:{b}", **folder_record(work / f"data-{i}")}
               for i, (c, rc, (a, b)) in enumerate(zip(cmds, rcs, slices))]
    done = [e for e in engines if e["shard_files"] > 1]
    span = (max(e["last_write"] for e in done) - min(e["first_write"] for e in done)) if done else 0.0
    reply = sum(e["reply_tokens"] for e in engines)
    main = {"engines": engines, "wall_s": round(wall, 1), "reply_tokens": reply,
            "samples": sum(e["samples"] for e in engines),
            "reply_tokens_per_s_wall": round(reply / wall, 1),
            "steady_reply_tokens_per_s": round(sum(e["steady_reply_tokens_per_s"] or 0 for e in engines), 1),
            "span_s": round(span, 1),
            "note": "steady: per engine, the reply tokens of every turn file after its first over the time between "
                    "its first and last writes (vLLM start-up and the first turn excluded), summed over engines; "
                    "wall: all reply tokens over the stage's wall time, start-ups included"}
    log(f"regeneration: {main['reply_tokens']} reply tokens, {main['samples']} samples, "
        f"steady {main['steady_reply_tokens_per_s']} tok/s, wall {main['reply_tokens_per_s_wall']} tok/s")
    write_json({"ab": ab, "main": main}, out / "regen_throughput.json")


def shard_tokens_one(path: Path) -> int:
    import torch

    return sum(s["ids"].numel() - int(s["prompt_len"]) for s in torch.load(path, weights_only=True))


RECIPES = {   # the shipped pair's shapes (P-EAGLE one layer deeper: the paper's 4), same data, same steps
    "peagle": dict(method="peagle", num_layers=4, intermediate_size=256, max_depth=8, cod_ratio=0.8,
                   hidden_noise=0.05),
    "eagle": dict(method="eagle", num_layers=1, intermediate_size=1024),
}


# GPU memory, GiB. The trainers' peaks: torch's, one process alone, at batch 64 of ShareGPT-like lengths longer
# than the regenerated replies (train_step_batch_h200.json); they scale with the conversations per micro-batch.
TRAINER_PEAK_GIB = {"peagle": 30.6, "eagle": 14.1}
ALLOCATOR_SLACK = 1.2    # what torch's caching allocator holds beyond its peak, with lengths that change every step
CONTEXT_GIB = 0.6        # a CUDA context, per process
ENGINE_GIB = 3.0         # one vLLM engine beside its KV cache: bf16 weights, CUDA graphs to 1,024 sequences, workspace
EVAL_GIB = 3.0           # eval-live: the target in float32, 80 replies, one drafter replayed at a time
MARGIN_GIB = 2.0
KV_MAX_GIB, KV_WANT_GIB, KV_MIN_GIB = 16.0, 8.0, 4.0    # the engines' KV cache: the H200 runs' 16 at most


def smi(query: str) -> list[list[str]]:
    """nvidia-smi's answer to ``--query-<query>`` for the GPU this run uses (the first of CUDA_VISIBLE_DEVICES),
    one list of fields a row; nothing when nvidia-smi is missing or fails."""
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    try:
        got = subprocess.run(["nvidia-smi", "-i", gpu, f"--query-{query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = [line.rsplit(",", query.count(",")) for line in got.stdout.splitlines() if line.strip()]
    return [[x.strip() for x in row] for row in rows] if got.returncode == 0 else []


def gpu_info() -> tuple[str, float] | None:
    """The GPU's name and memory in GiB, from nvidia-smi (no CUDA context in this process); None without one."""
    try:
        (name, mib), *_ = smi("gpu=name,memory.total")
        return name, int(mib) / 1024
    except ValueError:                         # no row, or "[N/A]"
        return None


def gpu_total_gib() -> float | None:
    info = gpu_info()
    return info[1] if info else None


def memory_plan(total_gib: float, engines: int, *, trainers: bool, eval_live: bool, batch: int = 64,
                micro: int = 0, kv: float | None = None) -> dict:
    """How the run shares one GPU: the trainers' micro-batches and each vLLM engine's KV cache.

    The engines get what the trainers (and eval-live) leave, up to 16 GiB each; with ``micro`` 0 the trainers
    take the fewest micro-batches (1, 2 or 4: the same gradient, less peak memory) that leave each engine 8 GiB,
    so a 141 GB H200 runs as measured (one pass a step, 16 GiB each) and an 80 GB card splits each step in two.

    >>> [memory_plan(t, 4, trainers=True, eval_live=True)[k] for t in (140.4, 79.6) for k in ("micro", "kv_gib")]
    [1, 16.0, 2, 8.0]
    >>> memory_plan(79.6, 4, trainers=False, eval_live=False)["kv_gib"]       # regeneration alone
    16.0
    """
    def beside(m: int) -> float:              # what the trainers and the eval hold, with m micro-batches
        held = sum(TRAINER_PEAK_GIB.values()) * batch / 64 / m * ALLOCATOR_SLACK + 2 * CONTEXT_GIB if trainers else 0
        return held + (EVAL_GIB + CONTEXT_GIB if eval_live else 0)

    def room(m: int) -> float:                # KV cache each engine can have
        return math.floor(((total_gib - beside(m) - MARGIN_GIB) / max(engines, 1) - ENGINE_GIB) * 2) / 2

    choices = [micro] if micro else ([c for c in (1, 2, 4) if c <= batch] if trainers else [1])
    if engines:
        m = next((c for c in choices if room(c) >= (kv or KV_WANT_GIB)), choices[-1])
    else:                                     # the trainers alone: the fewest micro-batches that fit
        m = next((c for c in choices if beside(c) + MARGIN_GIB <= total_gib), choices[-1])
    got = min(KV_MAX_GIB, room(m)) if kv is None else kv
    if engines and (got < KV_MIN_GIB or room(m) < got):
        raise SystemExit(f"{total_gib:.1f} GiB of GPU memory leave each of {engines} vLLM engines "
                         f"{max(room(m), 0.0):.1f} GiB of KV cache beside the trainers ({m} micro-batches), under the "
                         f"{max(got, KV_MIN_GIB):.1f} GiB an engine needs: use fewer engines (--slices), regenerate "
                         "first and train after (stages regen train), or give --kv-cache-gib")
    return {"total_gib": round(total_gib, 1), "engines": engines, "micro": m, "kv_gib": got,
            "trainers_and_eval_gib": round(beside(m), 1)}


def plan_for(args, stage: str) -> dict:
    """:func:`memory_plan` for ``stage`` on this run's GPU: ``stream`` (the engines and trainers at once: both
    ask, and get the same answer), ``regen`` (the engines alone) or ``train`` (the trainers alone)."""
    engines = len(args.slices.split(",")) if stage != "train" else 0
    total = gpu_total_gib() if DEVICE == "cuda" else None
    if DEVICE == "cuda" and total is None and not (args.micro_batches and (args.kv_cache_gib or not engines)):
        raise SystemExit("nvidia-smi did not say how much memory the GPU has: give --micro-batches and "
                         "--kv-cache-gib (MICRO and KV_GIB in data_scale.sh; an H200 runs 1 and 16)")
    if total is None:                         # nothing to size for (a CPU dry run): the flags, or the H200's plan
        return {"total_gib": None, "engines": engines, "micro": args.micro_batches or 1,
                "kv_gib": args.kv_cache_gib or KV_MAX_GIB, "trainers_and_eval_gib": None, "gpu": None}
    plan = memory_plan(total, engines, trainers=stage != "regen",
                       eval_live=stage != "regen" and "eval" in args.stages, batch=args.batch_size,
                       micro=args.micro_batches, kv=args.kv_cache_gib)
    info = gpu_info()
    return {**plan, "gpu": info[0] if info else None}


class MemorySampler:
    """Every ``every_s`` seconds, one JSON line in ``path``: the GPU's memory in use and each process's share
    (nvidia-smi, MiB), so a run records what its memory plan left unused or too tight; ``max_used_mib`` last."""

    def __init__(self, path: Path, every_s: float = 30.0):
        import threading

        self.path, self.every_s, self.max_used = path, every_s, 0
        path.unlink(missing_ok=True)          # a folder used before: this run's samples only
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def __call__(self) -> dict:
        """One sample: ``used_mib`` and ``total_mib`` when nvidia-smi says them, each process's MiB that it says."""
        line: dict = {"time": time.strftime("%H:%M:%S")}
        for row in smi("gpu=memory.used,memory.total")[:1]:
            for key, value in zip(("used_mib", "total_mib"), row):
                if value.isdigit():
                    line[key] = int(value)
        line["by_pid"] = {pid: int(mib) for pid, mib in smi("compute-apps=pid,used_memory") if mib.isdigit()}
        return line

    def _run(self) -> None:
        while not self.done.wait(self.every_s):
            line = self()
            self.max_used = max(self.max_used, line.get("used_mib", 0))
            with open(self.path, "a") as f:
                f.write(json.dumps(line) + "\n")

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=60)
        with open(self.path, "a") as f:
            f.write(json.dumps({"max_used_mib": self.max_used or None}) + "\n")


def stage_train(args, out: Path, method: str) -> None:
    from peagle_lab.target import Target
    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.data import load_samples
    from peagle_lab.train.trainer import Trainer
    from peagle_lab.train.vocab import build_draft_vocab, token_counts

    work = Path(args.work)
    target = Target.load(device=DEVICE)
    samples = [x for d in sorted(work.glob("data*")) if any(d.glob("shard-*.pt")) for x in load_samples(d)]
    cfg = TrainConfig(**RECIPES[method], draft_vocab_size=4096, batch_size=args.batch_size, max_len=768, lr=1e-3,
                      warmup_steps=100, checkpoint_every=200, group_by_length=True, seed=0,
                      steps=math.ceil(len(samples) / args.batch_size),
                      micro_batches=args.micro_batches or plan_for(args, "train")["micro"])
    ids, coverage = build_draft_vocab(token_counts(samples, target.vocab_size), 4096)
    trainer = Trainer(target, samples, cfg, work / f"run-{method}", ids)
    # reply tokens (inside max_len) seen after each sample of the one-pass order
    reply = [max(0, min(s.ids.numel(), cfg.max_len) - s.prompt_len) for s in samples]
    seen = [0]
    for i in trainer.order:
        seen.append(seen[-1] + reply[i])
    marks = [m * 10**6 for m in MILESTONES_M if m * 10**6 <= seen[-1]]
    log(f"{method}: {len(samples)} samples, {seen[-1]} reply tokens, {cfg.steps} steps planned, milestones {marks}")
    rows, t0, total = [], time.perf_counter(), cfg.steps
    deadline = t0 + args.train_s
    while trainer.step < total:
        row = trainer.train_step()
        step = trainer.step
        if step == 13:
            t_warm = time.perf_counter()
        if step > 13 and (step - 13) % 100 == 0:               # fit the cosine to the time left
            per = (time.perf_counter() - t_warm) / (step - 13)
            left = int((deadline - time.perf_counter()) / per)
            total = trainer.total_steps = max(step + 1, min(cfg.steps, step + left))
        tokens = seen[min(len(seen) - 1, step * cfg.batch_size)]
        due = [m for m in marks if tokens >= m and m not in {r["milestone"] for r in rows}]
        if due or step == total:
            name = f"{method}-{tokens / 1e6:.1f}M"
            path = trainer.export(work / "exports" / name, overwrite=True)
            rows.append({"method": method, "milestone": due[-1] if due else tokens, "reply_tokens": tokens,
                         "steps": step, "planned_steps": total, "lr_factor": trainer.sched.get_last_lr()[0] / cfg.lr,
                         "loss": row["loss"], "acc_per_depth": row["acc_per_depth"], "drafter": str(path),
                         "seconds": round(time.perf_counter() - t0, 1)})
            log(f"{method}: export {name} at step {step} ({tokens} reply tokens)")
            write_json({"config": {**cfg.__dict__, "steps": total}, "coverage": coverage, "rows": rows,
                        "samples": len(samples), "reply_tokens": seen[-1]}, out / f"train_{method}.json")
        if step % 200 == 0:
            trainer.save_checkpoint()
    trainer.save_checkpoint()


class TurnFiles:
    """The samples of every turn file under ``work/data*`` not read yet (turn files are written whole, by rename:
    a reader never sees half of one; one that fails to load is tried again on the next call)."""

    def __init__(self, work: Path):
        self.work, self.read = work, set()

    def fresh(self) -> list:
        import torch

        from peagle_lab.train.data import Sample

        new = []
        for f in sorted(f for d in sorted(self.work.glob("data*")) for f in d.glob("shard-*.pt")):
            if f in self.read:
                continue
            try:
                new.extend(Sample(x["ids"].long(), int(x["prompt_len"])) for x in torch.load(f, weights_only=True))
            except Exception as e:      # noqa: BLE001 - whatever broke the read, the next call reads it again
                log(f"{f.name}: not readable yet ({type(e).__name__})")
                continue
            self.read.add(f)
        return new


def grow(trainer, new: list) -> None:
    """Append ``new`` samples behind every one already in ``trainer``'s pool, in the trainer's own
    length-grouped order: the pass stays one pass (no index comes twice) while the pool grows."""
    from peagle_lab.train.trainer import sample_order

    base = len(trainer.samples)
    trainer.samples.extend(new)
    trainer.order.extend(base + i for i in sample_order(new, trainer.cfg))


def stream_train(trainer, files: TurnFiles, *, done, deadline: float, marks: list[int], export,
                 poll_every: int = 20, wait_s: float = 5.0, seen: int = 0, save=None, save_every_s: float = 120.0,
                 skip=frozenset(), micro_after: int = 0, micro_after_s: float = 20.0) -> int:
    """Train ``trainer`` one pass over a pool that grows as turn files land, until ``deadline`` (perf_counter) or
    until the pool is spent and ``done()`` says no more will come. The cosine is refitted every 50 steps to the
    time left, and, once ``done()`` holds, to the pool left when that is the shorter: a run whose data ends before
    its time still ends annealed, not cut off at a high learning rate. ``export(tokens, step)`` is called at
    each reply-token milestone in ``marks`` and at the end;
    ``save(tokens)`` every ``save_every_s`` seconds and at the end. ``seen``: reply tokens an earlier window
    trained on (a continued run); ``skip``: :func:`sample_key` of samples it trained on, never trained again.
    ``micro_after``: the micro-batches from ``micro_after_s`` seconds after ``done()`` holds (time for the engines'
    processes to give their memory back), when fewer than the trainer takes beside them: the same gradient, fewer
    passes a step. Returns the reply tokens seen, earlier windows included."""
    cfg, b = trainer.cfg, trainer.cfg.batch_size
    first, last_fit, last_export = trainer.step, trainer.step, None
    timed = None                        # (time, step) the step time is measured from: after the first step, and
    last_save, final, switch_at = time.perf_counter(), False, None     # again when the engines stop (faster steps)
    refit_at = None                     # the step a fresh measure is first used at (20 steps after it starts)

    per = None                          # seconds a step; a new measure counts from 20 steps (the first: 1)

    def fit() -> None:                  # the cosine's end: the time left, or the pool left once it is final
        nonlocal per
        ends = [len(trainer.order) // b] if final else []
        if timed is not None and trainer.step - timed[1] >= (20 if per else 1):
            per = (time.perf_counter() - timed[0]) / (trainer.step - timed[1])
        if per:
            ends.append(trainer.step + max(1, int((deadline - time.perf_counter()) / per)))
        if ends:
            trainer.total_steps = max(trainer.step + 1, min(ends))

    while time.perf_counter() < deadline:
        poll = trainer.step % poll_every == 0 or (trainer.step + 1) * b > len(trainer.order)
        if poll or not final:
            final_now = not final and done()        # asked before reading: files written before it are read now
            if poll or final_now:
                new = [x for x in files.fresh() if not skip or sample_key(x) not in skip]
                if new:
                    grow(trainer, new)
            if final_now:
                final = True
                if 0 < micro_after < trainer.micro_batches:
                    switch_at = time.perf_counter() + micro_after_s
                fit()                               # from the step time so far; then timed from here on
                if timed is not None:
                    timed, refit_at = (time.perf_counter(), trainer.step), trainer.step + 20
        if switch_at is not None and time.perf_counter() >= switch_at:
            log(f"engines done: each step in {micro_after} micro-batch(es), not {trainer.micro_batches}")
            trainer.micro_batches, switch_at = micro_after, None
            if timed is not None:
                timed, refit_at = (time.perf_counter(), trainer.step), trainer.step + 20
        if (trainer.step + 1) * b > len(trainer.order):      # the next batch would reach past the pool
            if final:
                break
            time.sleep(wait_s)
            continue
        batch = [trainer.samples[i] for i in trainer.order[trainer.step * b:(trainer.step + 1) * b]]
        trainer.train_step()
        seen += sum(max(0, min(x.ids.numel(), cfg.max_len) - x.prompt_len) for x in batch)
        if timed is None:
            timed = (time.perf_counter(), trainer.step)
        elif trainer.step - last_fit >= (50 if last_fit > first else 2) or trainer.step == refit_at:
            fit()                                  # the time (or pool) left: at once (a resumed cosine must not run
            last_fit = trainer.step                # towards a placeholder end), then every 50 steps and 20 steps
                                                   # after the step time is measured afresh
        while marks and seen >= marks[0]:
            marks.pop(0)
            export(seen, trainer.step)
            last_export = trainer.step
        if save is not None and time.perf_counter() - last_save >= save_every_s:
            save(seen)
            last_save = time.perf_counter()
    if last_export != trainer.step:                            # the end, unless a milestone just exported it
        export(seen, trainer.step)
    if save is not None:
        save(seen)
    return seen


def sample_key(sample) -> int:
    """A sample's identity on any machine (packed, unpacked or as vLLM wrote it): 8 bytes of BLAKE2b over its
    token ids as int64 and its prompt length."""
    import hashlib

    import torch

    h = hashlib.blake2b(sample.ids.to(torch.int64).numpy().tobytes(), digest_size=8)
    h.update(int(sample.prompt_len).to_bytes(8, "little"))
    return int.from_bytes(h.digest(), "little", signed=True)


def stream_state(trainer, seen_tokens: int, skip) -> dict:
    """What a later window needs to go on where this one stopped: the drafter, optimiser and step, the reply tokens
    seen so far, the key of every sample trained on and the training history (this window's and earlier ones')."""
    import torch
    from dataclasses import asdict

    b = trainer.cfg.batch_size
    done = [trainer.samples[i] for i in trainer.order[: trainer.step * b] if i is not None]
    keys = sorted(set(skip) | {sample_key(x) for x in done})
    return {"drafter": trainer.drafter.state_dict(), "opt": trainer.opt.state_dict(), "step": trainer.step,
            "config": asdict(trainer.cfg), "draft_ids": trainer.draft_ids.cpu(), "target": trainer.provenance["target"],
            "reply_tokens_seen": seen_tokens, "seen": torch.tensor(keys, dtype=torch.int64),
            "history": list(trainer.history)}


def write_carry(out: Path, trainer, method: str, tokens: int, keys) -> Path:
    """``out/carry-<method>/``: what a later allocation needs to go on from here if the machine, and the full state
    on it, is gone: the weights as an export (``<method>-<N>M``), the sample keys (``seen-<method>.pt``) and
    ``resume-<method>.json`` (reply tokens, steps). About 19 MB for P-EAGLE, so every waiting call of
    data_scale.sh brings back the newest; :func:`load_resume` reads the folder as it is. Replaced whole: a new
    folder is written beside the old one, the old one is renamed aside, the new one into its place, and only then
    is the old one deleted, so ``carry-<method>`` is always one whole folder or, for an instant, absent (a
    bring-back that meets that instant fails and is made again by the next call)."""
    import shutil

    import torch

    new, done, old = out / f"carry-{method}.new", out / f"carry-{method}", out / f"carry-{method}.old"
    shutil.rmtree(new, ignore_errors=True)
    name = f"{method}-{tokens / 1e6:.1f}M"
    trainer.export(new / name)
    torch.save(keys, new / f"seen-{method}.pt")
    (new / f"resume-{method}.json").write_text(json.dumps({method: {
        "export": name, "steps": trainer.step, "reply_tokens_seen": tokens, "seen_file": f"seen-{method}.pt"}}))
    shutil.rmtree(old, ignore_errors=True)
    if done.exists():
        done.rename(old)
    new.rename(done)
    shutil.rmtree(old, ignore_errors=True)
    return done


def load_resume(folder: Path, method: str, target) -> dict | None:
    """What ``--resume`` holds for ``method``: ``stream-<method>.pt`` (a state a window saved: exact), else an
    exported drafter folder ``<method>-*`` named in ``resume.json`` or ``resume-<method>.json`` (a carry folder,
    :func:`write_carry`) with the reply tokens and steps it was trained on (weights only: the optimiser starts
    afresh). None when it holds neither."""
    import torch

    from peagle_lab.checkpoint import load_drafter

    if (folder / f"stream-{method}.pt").exists():
        state = torch.load(folder / f"stream-{method}.pt", map_location="cpu", weights_only=False)
        return {**state, "source": str(folder / f"stream-{method}.pt")}
    record = {}
    for f in sorted(folder.glob("resume*.json")):
        record.update(json.loads(f.read_text()))
    if method not in record:
        return None
    r = record[method]
    if "seen_file" in r:                  # the sample keys a window saved beside its state (seen-<method>.pt)
        r = {**r, "seen": torch.load(folder / r["seen_file"], weights_only=True).tolist()}
    drafter = load_drafter(folder / r["export"], target)
    ids = drafter.to_target_ids(torch.arange(drafter.cfg.draft_vocab_size, device=drafter.d2t.device)).cpu()
    record = folder / r["export"] / "training.json"                    # the history the export kept (thinned)
    history = json.loads(record.read_text()).get("history", []) if record.exists() else []
    return {"drafter_module": drafter, "draft_ids": ids, "step": int(r["steps"]), "reply_tokens_seen":
            int(r["reply_tokens_seen"]), "seen": torch.tensor(r.get("seen", []), dtype=torch.int64),
            "source": str(folder / r["export"]), "history": history}


def continue_from(trainer, state: dict) -> None:
    """Put a resumed state into a freshly built ``trainer`` (same recipe, same draft vocabulary, same target), at
    its step: the steps of earlier windows hold no sample of this pool (``None`` in the order). The cosine goes on
    from that step, refitted to this window's end, after a warm-up of ``warmup_steps`` that matters when the
    optimiser starts afresh (weights only) and costs little when it does not."""
    import torch

    from peagle_lab.train.data import target_difference
    from peagle_lab.train.trainer import lr_factor

    problems = []
    if "config" in state:
        diff = trainer._config_diff(state["config"])
        problems += [f"another training recipe (differs in {', '.join(diff)})"] if diff else []
    shape = [k for k in ("num_layers", "intermediate_size")
             if getattr(trainer.cfg, k) is not None and getattr(trainer.drafter.cfg, k) != getattr(trainer.cfg, k)]
    problems += [f"a drafter of another shape (differs in {', '.join(shape)})"] if shape else []
    other = target_difference(state["target"], trainer.provenance["target"]) if "target" in state else None
    problems += [other] if other else []
    if not torch.equal(state["draft_ids"].cpu(), trainer.draft_ids.cpu()):
        problems.append("another draft vocabulary")
    if problems:
        raise SystemExit(f"{state['source']}: cannot go on: this run has " + "; ".join(problems))
    if "drafter" in state:
        trainer.drafter.load_state_dict(state["drafter"])
        trainer.opt.load_state_dict(state["opt"])
    start, cfg = int(state["step"]), trainer.cfg
    trainer.step = start
    trainer.history = [*state.get("history", []), *trainer.history]   # the export's training.json: the whole run
    trainer.order = [None] * (start * cfg.batch_size) + trainer.order
    trainer.sched.lr_lambdas[0] = lambda s: (lr_factor(s, cfg.warmup_steps, trainer.total_steps)
                                             * min(1.0, (s - start + 1) / cfg.warmup_steps))
    trainer.sched.last_epoch = start - 1
    with warnings.catch_warnings():                     # no optimiser step yet in this process: expected here
        warnings.simplefilter("ignore", UserWarning)
        trainer.sched.step()


def stage_stream(args, out: Path, method: str) -> None:
    """``stream-<method>``: the method trained one pass over the data while vLLM is still writing it (stage
    ``stream`` runs regen beside both), each milestone exported as in ``train``. With ``--resume`` it goes on from
    an earlier window's state (or export), skipping every sample that window trained on; its own state is saved
    to ``--out``/``stream-<method>.pt`` every 2 minutes and at the end, for the next window."""
    import torch

    from peagle_lab.atomic import atomic_file
    from peagle_lab.target import Target
    from peagle_lab.train.config import TrainConfig
    from peagle_lab.train.trainer import Trainer
    from peagle_lab.train.vocab import build_draft_vocab, token_counts

    work, t0 = Path(args.work), time.perf_counter()
    target = Target.load(device=DEVICE)
    state = load_resume(Path(args.resume), method, target) if args.resume else None
    if args.resume and state is None:   # starting from zero here would reuse the milestone names of the run resumed
        raise SystemExit(f"{method}: cannot go on: --resume {args.resume} holds neither stream-{method}.pt nor a "
                         f"resume*.json naming a {method} export (park parts/resume-{method} too, or leave out "
                         "--resume to start from zero)")
    skip = frozenset(state["seen"].tolist()) if state else frozenset()
    files = TurnFiles(work)
    samples = [x for x in files.fresh() if sample_key(x) not in skip]
    while not samples and time.perf_counter() - t0 < args.train_s / 2:   # no carried data: the first turn files
        time.sleep(10)
        samples = [x for x in files.fresh() if sample_key(x) not in skip]
    cfg = TrainConfig(**RECIPES[method], draft_vocab_size=4096, batch_size=args.batch_size, max_len=768, lr=1e-3,
                      warmup_steps=100, checkpoint_every=10**9, group_by_length=True, seed=0, steps=10**6,
                      micro_batches=args.micro_batches or plan_for(args, "stream")["micro"])
    if state:
        ids, coverage = state["draft_ids"], None
    else:
        ids, coverage = build_draft_vocab(token_counts(samples, target.vocab_size), 4096)
    trainer = Trainer(target, samples, cfg, work / f"stream-{method}", ids,
                      drafter=state.get("drafter_module") if state else None)
    if state:
        continue_from(trainer, state)
        log(f"{method}: continues {state['source']} at step {trainer.step}, {state['reply_tokens_seen']} reply "
            f"tokens seen, {len(skip)} samples skipped")
    rows = []

    def export(tokens: int, step: int) -> None:
        name = f"{method}-{tokens / 1e6:.1f}M"
        path = trainer.export(work / "exports" / name, overwrite=True)
        rows.append({"method": method, "reply_tokens": tokens, "steps": step, "planned_steps": trainer.total_steps,
                     "lr_factor": trainer.sched.get_last_lr()[0] / cfg.lr, "drafter": str(path),
                     "micro_batches": trainer.micro_batches,
                     "samples_in_pool": len(trainer.samples), "seconds": round(time.perf_counter() - t0, 1),
                     **({"continued_from": state["source"]} if state else {})})
        log(f"{method}: export {name} at step {step}")
        pool = sum(max(0, min(x.ids.numel(), cfg.max_len) - x.prompt_len) for x in trainer.samples)
        write_json({"config": {**cfg.__dict__, "steps": trainer.total_steps}, "coverage": coverage, "rows": rows,
                    "streamed": True, "samples": len(trainer.samples), "reply_tokens": pool},
                   out / f"train_{method}.json")

    def save(tokens: int) -> None:
        state = stream_state(trainer, tokens, skip)
        with atomic_file(out / f"stream-{method}.pt") as tmp:     # a kill mid-save keeps the last state
            torch.save(state, tmp)
        write_carry(out, trainer, method, tokens, state["seen"])    # small enough to leave with every call

    seen0 = state["reply_tokens_seen"] if state else 0
    marks = [m * 10**6 for m in MILESTONES_M if m * 10**6 > seen0]
    after = args.micro_after_regen or plan_for(args, "train")["micro"]     # the trainers alone, when not given
    seen = stream_train(trainer, files, done=(out / "regen.done").exists, deadline=t0 + args.train_s, marks=marks,
                        export=export, seen=seen0, save=save, skip=skip, micro_after=after)
    log(f"{method}: {seen} reply tokens in {trainer.step} steps, pool {len(trainer.samples)} samples")


def batched_greedy(target, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Greedy replies of ``new_tokens`` tokens (on past EOS, as ``greedy_replies(stop_at_eos=False)``) for all
    prompts in one left-padded ``generate`` call in float32: the teaching engine makes them one token at a time,
    minutes on a GPU; padding can move a near-tie, so every drafter of a run is replayed on these same replies."""
    import copy

    import torch

    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else 0
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    config = copy.deepcopy(target.model.generation_config)
    config.update(do_sample=False, max_new_tokens=new_tokens, eos_token_id=None, pad_token_id=pad,
                  temperature=None, top_p=None, top_k=None)
    with torch.no_grad():
        out = target.model.generate(input_ids=ids.to(target.device), attention_mask=mask.to(target.device),
                                    generation_config=config)
    return [row[width:].tolist() for row in out.cpu()]


def weights_mark(folder: Path) -> str:
    """Which weights a drafter folder holds now: its weight files' sizes and modification times (an export is
    written whole and renamed into place, so a new one under the same name has new times)."""
    files = sorted(Path(folder).glob("*.safetensors"))
    return ";".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)


def stage_eval(args, out: Path, live: bool = False) -> None:
    """Every export under ``--work``/exports and the shipped pair replayed on the same greedy replies to the
    MT-Bench prompts at K = 3, 5, 7, into ``eval.json`` (rewritten after each K). A drafter already there at
    every K is not replayed again, so the stage can run as often as exports land. ``live`` (stage ``eval-live``,
    which ``train`` and ``stream`` start beside the trainers): replay each export as it lands, until the trainers
    are done (``train.done``). Each milestone's point then leaves the machine with the next waiting call instead
    of waiting for the end of the run, and the eval after training has only the last exports left."""
    from peagle_lab.checkpoint import load_drafter
    try:
        from peagle_lab.train.replay import evaluate_drafters, greedy_replies
    except ImportError:                                  # a library copy from before the move
        from peagle_lab.evaluate import evaluate_drafters, greedy_replies
    from peagle_lab.prompts import load_categories, load_prompts
    from peagle_lab.target import Target

    work, path, ks = Path(args.work), out / "eval.json", ("3", "5", "7")
    shipped = Path(os.environ.get("PEAGLE_SHIPPED", "peagle_lab/drafters"))    # a copy that outlives the call's tree
    fixed = {"peagle-shipped": shipped / "peagle-smollm2", "eagle-shipped": shipped / "eagle-smollm2"}

    def pending() -> tuple[dict, dict]:
        have = json.loads(path.read_text()) if path.exists() else {"by_k": {}}
        done = set.intersection(*(set(have["by_k"].get(k, {})) for k in ks))
        folders = {**fixed, **{p.name: p for p in sorted((work / "exports").glob("*"))    # an export's temporary
                               if p.is_dir() and EXPORT_NAME.fullmatch(p.name)}}     # folder is not one yet
        marks = have.get("weights", {})       # an export written again under its name is replayed again
        return have, {n: f for n, f in folders.items() if n not in done or marks.get(n) != weights_mark(f)}

    if not live and not pending()[1]:
        log("eval: every drafter is replayed already")
        return
    target = Target.load(device=DEVICE)
    texts = load_prompts("mt-bench", args.eval_prompts)
    categories = load_categories("mt-bench", args.eval_prompts)
    prompts = [target.chat_ids(p) for p in texts]
    if args.replies:                          # made once on a CPU in float32 (greedy replies one prompt at a time)
        made = json.loads(Path(args.replies).read_text())
        short = made["k"] < 7 or made["max_new_tokens"] < args.eval_new_tokens
        if made["prompt_ids"][: len(prompts)] != prompts or short:
            raise SystemExit(f"{args.replies} holds replies to other prompts or shorter ones: remake it")
        replies = made["replies"][: len(prompts)]
    elif DEVICE == "cuda":
        t = time.perf_counter()
        replies = batched_greedy(target, prompts, args.eval_new_tokens + 7 + 1)
        log(f"batched greedy replies in {time.perf_counter() - t:.0f} s")
    else:
        replies = greedy_replies(target, prompts, k=7, max_new_tokens=args.eval_new_tokens)
    while True:
        finished = (out / "train.done").exists()        # asked first: exports written before it are found below
        have, todo = pending()
        drafters, marks = {}, {}
        for n, f in todo.items():
            try:
                marks[n] = weights_mark(f)      # taken before reading: a rewrite meanwhile is caught next time
                drafters[n] = load_drafter(f, target).to(target.device).eval()
            except Exception as e:      # noqa: BLE001 - replaced as it was read: the next pass reads it again
                if not live or finished:
                    raise
                log(f"eval: {n} not readable yet ({type(e).__name__}: {e})")
        if drafters:
            for k in (3, 5, 7):
                cut = [r[: args.eval_new_tokens + k + 1] for r in replies]
                res = evaluate_drafters(target, drafters, prompts, cut, k=k, max_new_tokens=args.eval_new_tokens,
                                        categories=categories)
                have["by_k"].setdefault(str(k), {}).update(
                    {n: {"acceptance_length": r["acceptance_length"],
                         "acceptance_per_position": r["acceptance_per_position"]} for n, r in res.items()})
                log(f"K={k}: " + ", ".join(f"{n} {r['acceptance_length']:.3f}" for n, r in res.items()))
                if k == 7:                      # every K replayed: this drafter's numbers belong to these weights
                    have["weights"] = {**have.get("weights", {}), **{n: marks[n] for n in drafters}}
                write_json({"by_k": {k: have["by_k"][k] for k in sorted(have["by_k"], key=int)},
                            "weights": have.get("weights", {}), "prompts": f"mt-bench:{args.eval_prompts}",
                            "max_new_tokens": args.eval_new_tokens}, path)
            del drafters
            if DEVICE == "cuda":            # the trainers and engines on the same GPU get the memory back
                import torch

                torch.cuda.empty_cache()
        if not live or finished:
            return
        time.sleep(args.eval_poll_s)


SHIPPED = {   # the shipped pair: 3.69M distinct reply tokens in 16,384 conversations (data_stats.json), 9-11 passes
    "peagle-shipped": dict(method="peagle", reply_tokens=3_687_185, drafter="peagle_lab/drafters/peagle-smollm2"),
    "eagle-shipped": dict(method="eagle", reply_tokens=3_687_185, drafter="peagle_lab/drafters/eagle-smollm2"),
}


def last_export(work: Path, method: str) -> Path | None:
    """The export of ``method`` trained on the most reply tokens (``peagle-3.2M`` ...), if any."""
    found = sorted(work.glob(f"exports/{method}-*M"), key=lambda p: float(p.name.split("-")[1].rstrip("M")))
    return found[-1] if found else None


def stage_serve(args, out: Path) -> None:
    """The last P-EAGLE export served by CUDA vLLM: its learned mask row is materialised into a full embedding
    table on the way (peagle_lab.materialise), the path a user's own head takes; vLLM's acceptance counters on the
    same MT-Bench prompts can then be set beside the replay's (eval.json at --eval-new-tokens)."""
    drafter = last_export(Path(args.work), "peagle")
    if drafter is None:
        raise SystemExit("serve: no P-EAGLE export yet; run the train stage first")
    cmd = [sys.executable, "-m", "peagle_lab", "vllm-bench", "--methods", "peagle", "--k", "7",
           "--concurrency", "1,16", "--prompts", "mt-bench", "--num-prompts", str(args.eval_prompts),
           "--max-new-tokens", str(args.eval_new_tokens), "--drafter", f"peagle={drafter}",
           "--device", DEVICE, "--logs", str(out / "serve_logs"), "--json", str(out / "serve.json")]
    rc, wall, _ = run_timed(cmd, out / "serve.log", args.serve_s)
    log(f"serve {drafter.name}: rc {rc} in {wall:.0f} s")


def pack(work: Path, out: Path) -> None:
    """Each regenerated folder ``work/data*`` as ``out/<folder>.npz``: every sample's token ids as uint16 (the
    target's 49,152-token vocabulary fits), compressed, with lengths and prompt lengths (~2 bytes a token: 3.4M reply
    tokens in 8M tokens make 7 MB), so a run's data can leave the machine and train again on a later one."""
    import numpy as np
    import torch

    import shutil

    for folder in sorted(d for d in work.glob("data*") if (d / "regenerate.json").exists()):   # made here, not carried
        if not any(folder.glob("shard-*.pt")):
            log(f"pack: {folder.name} holds no turn file (its engine wrote nothing); skipped")
            continue
        shutil.copy(folder / "regenerate.json", out / f"{folder.name}.regenerate.json")
        ids, lens, prompt_lens = [], [], []
        for f in sorted(folder.glob("shard-*.pt")):
            for sample in torch.load(f, weights_only=True):
                ids.append(sample["ids"].numpy())
                lens.append(sample["ids"].numel())
                prompt_lens.append(int(sample["prompt_len"]))
        flat = np.concatenate(ids)
        if flat.max() >= 2**16:
            raise ValueError(f"{folder}: token ids past 65,535 do not fit uint16")
        np.savez_compressed(out / f"{folder.name}.npz", ids=flat.astype(np.uint16), lens=np.array(lens),
                            prompt_len=np.array(prompt_lens))
        log(f"packed {folder.name}: {len(lens)} samples, {flat.size} tokens")


def unpack(npz: Path, work: Path) -> Path:
    """A packed folder back as a one-shard regenerate folder ``work/data-<name>`` that training reads."""
    import numpy as np
    import torch

    folder = work / f"data-{npz.stem}"
    folder.mkdir(parents=True, exist_ok=True)
    z = np.load(npz)
    ends = np.cumsum(z["lens"])
    ids = torch.from_numpy(z["ids"].astype(np.int32))
    samples = [{"ids": ids[e - n: e].clone(), "prompt_len": int(p)}
               for e, n, p in zip(ends.tolist(), z["lens"].tolist(), z["prompt_len"].tolist())]
    torch.save(samples, folder / "shard-00000.pt")
    log(f"unpacked {npz.name}: {len(samples)} samples into {folder}")
    return folder


EQUAL_STEPS = {   # the recipe ablation's data arms: the same recipe and ~2,500-2,850 steps on 0.91M, then 1.97M tokens
    "benchmarks/results/ablation_eval_epochs.json": {
        "peagleE": dict(method="peagle", reply_tokens=914_000, steps=2845, samples=4631),
        "eagleE": dict(method="eagle", reply_tokens=914_000, steps=2697, samples=4631)},
    "benchmarks/results/ablation_eval_sampled_data.json": {
        "peagleS3": dict(method="peagle", reply_tokens=1_967_157, steps=2503, samples=9920),
        "eagleS3": dict(method="eagle", reply_tokens=1_967_157, steps=2346, samples=9920)},
}


def equal_step_rows() -> list[dict]:
    """Rows of the recipe ablation's data arms (P-EAGLE 4L MLP 384 / EAGLE-3 1L MLP 1536, batch 32, many passes)."""
    rows = []
    for source, arms in EQUAL_STEPS.items():
        by_k = json.loads(Path(source).read_text())["results_by_k"]
        for name, arm in arms.items():
            passes = arm["steps"] * 32 / arm["samples"]
            rows.append({**arm, "series": "equal steps", "name": name, "source": source, "batch_size": 32,
                         "al": {k: by_k[k][name]["acceptance_length"] for k in sorted(by_k, key=int)},
                         "acceptance_per_position_k7": by_k["7"][name]["acceptance_per_position"],
                         "passes": round(passes, 1), "reply_tokens_seen": round(passes * arm["reply_tokens"])})
    return rows


def collect(out: Path, dest: Path, command: str, keep: bool = False, series: str = "one pass") -> dict:
    """``data_scaling.json``: one row per drafter replayed in ``eval.json`` (the shipped pair and each one-pass
    export), plus the recipe ablation's equal-step data arms. ``series`` tells them apart. ``keep``: rows already
    in ``dest`` that this run did not replay again stay (a run continued over several allocations adds its
    milestones to the curve). ``series``: the one-pass rows' series; another than "one pass" (a second run of the
    same recipe) also prefixes their names (``<series>/peagle-2.0M``), so both runs' milestones stay apart."""
    ev = json.loads((out / "eval.json").read_text())
    trained = {}
    for m in ("peagle", "eagle"):
        f = out / f"train_{m}.json"
        if f.exists():
            t = json.loads(f.read_text())
            trained.update({Path(r["drafter"]).name: {**r, "samples_in_data": t["samples"], "streamed": "streamed" in t,
                                                       "reply_tokens_in_data": t["reply_tokens"]} for r in t["rows"]})
    rows = []
    for name in ev["by_k"]["7"]:
        al = {k: ev["by_k"][k][name]["acceptance_length"] for k in sorted(ev["by_k"], key=int)}
        per = ev["by_k"]["7"][name]["acceptance_per_position"]
        if name in SHIPPED:
            info = json.loads((Path(SHIPPED[name]["drafter"]) / "training.json").read_text())
            cfg = info["config"]
            passes = info["steps"] * cfg["batch_size"] / 16_384
            rows.append({**SHIPPED[name], "series": "shipped", "name": name, "al": al,
                         "acceptance_per_position_k7": per, "steps": info["steps"], "batch_size": cfg["batch_size"],
                         "passes": round(passes, 1), "reply_tokens_seen": round(passes * 3_687_185)})
        elif name in trained:
            r = trained[name]
            label = name if series == "one pass" else f"{series}/{name}"
            rows.append({"method": r["method"], "series": series, "name": label, "reply_tokens": r["reply_tokens"],
                         "al": al, "acceptance_per_position_k7": per, "drafter": name, "steps": r["steps"],
                         "batch_size": r.get("batch_size", 64), "planned_steps": r["planned_steps"],
                         "lr_factor_at_export": round(r["lr_factor"], 4), "passes": 1,
                         "reply_tokens_seen": r["reply_tokens"], **({"streamed": True} if r["streamed"] else {}),
                         **({"continued_from": r["continued_from"]} if "continued_from" in r else {})})
    rows += equal_step_rows()
    commands, about, regens = [command], {}, []
    if keep and dest.exists():
        old = json.loads(dest.read_text())
        names = {r["name"] for r in rows}
        rows += [r for r in old["rows"] if r["name"] not in names]
        commands = [*old.get("commands", [old.get("command")]), command]
        about = {k: old[k] for k in ("date", "what", "machine") if k in old}     # written by hand: they stay
        regens = [old["regeneration"], *old.get("later_regenerations", [])] if "regeneration" in old else []
    rows.sort(key=lambda r: (r["series"], r["method"], r["reply_tokens"]))
    result = {**about, "commands": commands, "prompts": ev["prompts"], "max_new_tokens": ev["max_new_tokens"],
              "rows": rows}
    regen = out / "regen_throughput.json"
    if regen.exists():                  # each allocation's record; the first stays where it was
        new = {**json.loads(regen.read_text()), "series": series}
        same = {k: v for k, v in new.items() if k != "series"}     # a record kept before series were named
        regens = [r for r in regens if {k: v for k, v in r.items() if k != "series"} != same] + [new]
    if regens:
        result["regeneration"] = regens[0]
        if regens[1:]:
            result["later_regenerations"] = regens[1:]
    write_json(result, dest)
    return result


def record(out: Path, dest: Path, command: str, machine: str | None, what: str) -> dict:
    """The raw record of one allocation, from the folder its last ``results.tgz`` was unpacked into: the command
    and machine as given, the driver's log, each trainer's JSON and log lines (progress bars dropped), the
    regeneration record with each engine's settings, the memory plan with the GPU's samples, and the eval with
    its log. ``machine``: the GPU the memory plan names unless given. ``collect`` makes the curve from the same
    folder; this keeps what the curve does not."""
    import datetime as dt

    def lines(path: Path) -> list[str]:
        text = path.read_text(errors="replace").replace("\r", "\n") if path.exists() else ""
        return [x for x in text.splitlines() if x.strip() and "it/s]" not in x and "s/it]" not in x]

    driver = lines(out / "driver.log")
    if not (out / "eval.json").exists() or not driver or not driver[-1].endswith("] done"):
        raise SystemExit(f"{out}: the run had not finished (its driver.log does not end with 'done'): unpack the "
                         "results.tgz of the call that printed 'finished'")
    at_eval = next((i for i, x in enumerate(driver) if x.endswith("stage eval")), len(driver))
    plans = {p.stem.removeprefix("memory_plan_"): json.loads(p.read_text()) for p in sorted(out.glob("memory_plan_*"))}
    machine = machine or next((p["gpu"] for p in plans.values() if p.get("gpu")), None)
    if not machine:
        raise SystemExit(f"{out} names no GPU (no memory_plan_*.json): give --machine")
    result = {"date": dt.date.today().isoformat(), "machine": machine, "command": command, "what": what,
              "driver_log": driver[:at_eval], "train": {}, "train_logs": {}}
    for m in ("peagle", "eagle"):
        if (out / f"train_{m}.json").exists():
            result["train"][m] = json.loads((out / f"train_{m}.json").read_text())
            result["train_logs"][m] = lines(out / f"train_{m}.log")
    if (out / "regen_throughput.json").exists():
        result["regeneration"] = json.loads((out / "regen_throughput.json").read_text())
    if plans:
        samples = []
        for x in lines(out / "gpu_memory.log"):
            try:
                samples.append(json.loads(x))
            except json.JSONDecodeError:      # the line being written when the run was packed
                continue
        used = [s["used_mib"] for s in samples if "used_mib" in s]
        result["memory"] = {"plans": plans, "max_used_mib": max(used, default=None), "samples": samples}
    result["eval"] = json.loads((out / "eval.json").read_text())
    result["eval_log"] = lines(out / "eval_live.log") + driver[at_eval:]      # replayed as they landed, then the rest
    write_json(result, dest)
    return result


STAGES = {"unpack", "regen", "stream", "train", "eval", "eval-live", "serve", "pack", "collect", "record"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stages", nargs="+",
                    choices=["unpack", "regen", "stream", "train", "train-peagle", "train-eagle", "stream-peagle",
                             "stream-eagle", "eval", "eval-live", "serve", "pack", "collect", "record"])
    ap.add_argument("--serve-s", type=float, default=420, help="serve: the most seconds vLLM may take")
    ap.add_argument("--packed", nargs="*", default=[], help="unpack: .npz files a pack stage made (carried data)")
    ap.add_argument("--resume", default=None,
                    help="stream: a folder with stream-<method>.pt states an earlier window saved (or exports named "
                         "in resume.json): both methods go on from there")
    ap.add_argument("--dest", default="benchmarks/results/data_scaling.json", help="collect: the JSON to write")
    ap.add_argument("--record-to", default=None, help="record: the raw record to write (benchmarks/results/...)")
    ap.add_argument("--command", default=None, help="record: the data_scale.sh call that started the run")
    ap.add_argument("--machine", default=None,
                    help="record: the GPU it ran on (default: the one its memory plan names)")
    ap.add_argument("--what", default="", help="record: one sentence on what the run was")
    ap.add_argument("--keep-rows", action="store_true",
                    help="collect: keep the rows already in --dest that this run did not replay again")
    ap.add_argument("--series", default="one pass",
                    help="collect: the series of this run's one-pass rows (another run of the recipe: its own name)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/ds")
    ap.add_argument("--regen-s", type=float, default=480)
    ap.add_argument("--train-s", type=float, default=600)
    ap.add_argument("--conversations", type=int, default=90000)
    ap.add_argument("--vllm-batch", type=int, default=1024)
    ap.add_argument("--slices", default="0:4348,4348:8696,8696:13044,13044:17393",
                    help="regen: conversations START:END per vLLM engine, all run at once (a new slice each session)")
    ap.add_argument("--seed", type=int, default=1, help="regen: engine i samples with seed SEED + i")
    ap.add_argument("--gpu-memory", type=float, default=0.6, help="regen: the GPU memory share of all engines together")
    ap.add_argument("--replies", default=None, help="eval: greedy MT-Bench replies made beforehand (JSON)")
    ap.add_argument("--shard-size", type=int, default=2048)
    ap.add_argument("--kv-cache-gib", type=float, default=None,
                    help="regen: each engine's KV cache (1,024 full sequences of 896 tokens: ~20 GiB); default: what "
                         "the GPU leaves beside the trainers, 16 at most (memory_plan)")
    ap.add_argument("--micro-batches", type=int, default=0,
                    help="train/stream: each step in this many micro-batches (the same gradient, less memory); "
                         "0: the fewest that leave the engines 8 GiB each (memory_plan)")
    ap.add_argument("--micro-after-regen", type=int, default=0,
                    help="stream: each step in this many micro-batches once the engines are done (their memory is "
                         "free then); 0: the fewest that fit the trainers alone (memory_plan)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--ab-prompts", type=int, default=0, help="regen: first turns for the transformers/vLLM A/B")
    ap.add_argument("--eval-prompts", type=int, default=80)
    ap.add_argument("--eval-new-tokens", type=int, default=128, help="eval: reply tokens replayed per prompt")
    ap.add_argument("--eval-poll-s", type=float, default=20.0, help="eval-live: seconds between looks for exports")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    args = ap.parse_args()
    global DEVICE, MAX_NEW
    DEVICE, MAX_NEW = args.device, args.max_new_tokens
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stage in args.stages:
        log(f"stage {stage}")
        if stage == "regen":
            stage_regen(args, out)
        elif stage in ("train", "stream"):                   # both methods at once, one process each
            plan = plan_for(args, stage)        # sized here once: every process of the stage gets the same
            if stage == "stream":               # and once the engines are done: the trainers (and eval) alone,
                alone = (memory_plan(plan["total_gib"], 0, trainers=True, eval_live="eval" in args.stages,
                                     batch=args.batch_size)["micro"] if plan["total_gib"] else plan["micro"])
                plan["micro_after_regen"] = args.micro_after_regen or alone     # whatever MICRO was set to
            args.micro_batches = plan["micro"]
            if stage == "stream":
                args.kv_cache_gib = plan["kv_gib"]
            write_json(plan, out / f"memory_plan_{stage}.json")
            log(f"memory plan: {plan}")
            me = [a for a in sys.argv[1:] if a not in STAGES] + ["--micro-batches", str(plan["micro"])]
            if stage == "stream":
                me += ["--micro-after-regen", str(plan["micro_after_regen"])]
            sampler = MemorySampler(out / "gpu_memory.log") if DEVICE == "cuda" else None
            for flag in ("train.done", "regen.done"):          # a folder used before starts clean
                (out / flag).unlink(missing_ok=True)
            procs = [subprocess.Popen([sys.executable, __file__, f"{stage}-{m}", *me],
                                      stdout=open(out / f"train_{m}.log", "w"), stderr=subprocess.STDOUT)
                     for m in ("peagle", "eagle")]
            live = (subprocess.Popen([sys.executable, __file__, "eval-live", *me],
                                     stdout=open(out / "eval_live.log", "w"), stderr=subprocess.STDOUT)
                    if "eval" in args.stages else None)
            log("processes (gpu_memory.log's by_pid): " + ", ".join(
                f"{n} {p.pid}" for n, p in (("peagle", procs[0]), ("eagle", procs[1]), ("eval-live", live)) if p))
            try:
                if stage == "stream":   # regenerate beside them; pack as soon as the data is whole
                    try:
                        stage_regen(args, out, beside=True)
                    finally:            # whatever happened to the engines, the trainers spend what is there
                        (out / "regen.done").touch()
                    pack(Path(args.work), out)
            finally:                    # and eval-live ends after them even if this stage broke
                for p in procs:
                    p.wait()
                (out / "train.done").touch()
                if live is not None:    # its last pass replays the last exports; stage eval then finds none left
                    live.wait()
                if sampler is not None:
                    sampler.stop()
        elif stage.startswith("train-"):
            stage_train(args, out, stage.removeprefix("train-"))
        elif stage.startswith("stream-"):
            stage_stream(args, out, stage.removeprefix("stream-"))
        elif stage == "serve":
            stage_serve(args, out)
        elif stage == "pack":
            pack(Path(args.work), out)
        elif stage == "unpack":
            for f in args.packed:
                unpack(Path(f), Path(args.work))
        elif stage == "collect":
            collect(out, Path(args.dest), "python " + " ".join(sys.argv), keep=args.keep_rows, series=args.series)
        elif stage == "eval-live":
            stage_eval(args, out, live=True)
        elif stage == "record":
            if not args.command or not args.record_to:
                raise SystemExit("record needs --record-to FILE (the raw record to write) and --command '...' (the "
                                 "data_scale.sh call that started the run)")
            record(out, Path(args.record_to), args.command, args.machine, args.what)
        else:
            stage_eval(args, out)
    log("done")


if __name__ == "__main__":
    main()
