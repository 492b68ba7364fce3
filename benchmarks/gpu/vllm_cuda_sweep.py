"""CUDA vLLM on a GPU: start a stage's servers together, then load them one at a time.

    python benchmarks/gpu/vllm_cuda_sweep.py STAGE --out DIR [--budget-s 520]

``peagle-lab vllm-bench`` starts one server per (method, K) and waits for it before the next; on a
GPU a start with CUDA graphs costs minutes, most of it compile and capture on the host. This
script starts every server of a stage at once (the GPU holds them all: each gets a small, fixed
KV cache), then loads each in turn with the library's own pieces (``run_loads``: vLLM's
``vllm bench serve`` plus the spec-decode counters around each run) and stops it. A row is
written to ``DIR/<config>.json`` the moment its configuration finishes, and configurations already
in ``$VRES`` (kept on the machine between calls) are skipped, so a call cut short loses only the
configuration in progress.

Stages (a name -> configurations, each ``(name, method, K, runner, extra server flags)``): ``sweep`` (AR
and EAGLE-3 on both model runners, then every method at K 3, 5, 7 on one runner) and ``quick`` (K=3 only).
``runner`` "v1" sets ``VLLM_USE_V2_MODEL_RUNNER=0``; "auto" leaves vLLM its own choice.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

from peagle_lab.serving.bench import make_row, mark_identical, render_prompts, run_loads, vllm_version, write_dataset
from peagle_lab.serving.server import ServeConfig, free_port, serve_command

# per server: 64 requests x 2,048 tokens of a 135M target fit in ~3 GB
KV_BYTES = int(os.environ.get("KV_BYTES", 4 << 30))
DTYPE = os.environ.get("DTYPE", "bfloat16")
# only the start-up check reads it once the KV size is fixed
MEMORY_FRACTION = float(os.environ.get("MEMORY_FRACTION", 0.05))

RUNNER = os.environ.get("RUNNER", "v1")
STAGES = {
    # the question first: which model runner each method takes (auto lets vLLM choose: V2 for AR and EAGLE-3,
    # V1 for parallel drafting, which V2 lacks), then every method on the same runner at K 3, 5, 7
    "sweep": [("ar-v1", "ar", None, "v1", []), ("ar-auto", "ar", None, "auto", []),
              ("eagle-k3-auto", "eagle", 3, "auto", [])]
             + [(f"{m}-k{k}-{RUNNER}", m, k, RUNNER, []) for m in ("eagle", "peagle") for k in (3, 5, 7)],
    "quick": [("ar-v1", "ar", None, "v1", []), ("eagle-k3-v1", "eagle", 3, "v1", []),
              ("peagle-k3-v1", "peagle", 3, "v1", [])],
}


def start(cfg: ServeConfig, runner: str, log: Path) -> SimpleNamespace:
    port = free_port()
    env = dict(os.environ, VLLM_LOGGING_LEVEL="INFO")
    if runner == "v1":
        env["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    cmd = serve_command(cfg, port)
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    return SimpleNamespace(cfg=cfg, url=f"http://127.0.0.1:{port}", log_path=log, proc=proc, cmd=cmd,
                           started=time.time(), ready=None)


def healthy(server) -> bool:
    if server.proc.poll() is not None:
        raise RuntimeError(f"{server.log_path.name}: vLLM exited ({server.proc.returncode}):\n"
                           + server.log_path.read_text()[-2500:])
    try:
        with urllib.request.urlopen(server.url + "/v1/models", timeout=2) as r:
            return str(server.cfg.target) in r.read().decode()
    except OSError:
        return False


def stop(server) -> None:
    try:
        os.killpg(server.proc.pid, 15)
        server.proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(server.proc.pid, 9)
        except ProcessLookupError:
            pass


def log_facts(text: str) -> list[str]:
    keys = ("Model Runner", "model runner", "arallel drafting", "alling back", "capped", "max_num_scheduled_tokens",
            "compiled during", "cudagraph_mode", "Capturing CUDA graph", "Graph capturing finished", "mask_hidden",
            "Error", "not supported")
    return [line.strip()[:300] for line in text.splitlines() if any(k in line for k in keys)][:40]


def load_sets(tokenizer, sets: list[tuple[str, int]], max_new_tokens: int, work: Path) -> dict:
    from peagle_lab.prompts import load_prompts

    out = {}
    for name, n in sets:
        texts, add = render_prompts(tokenizer, load_prompts(name, n, spread=True))
        out[name] = (write_dataset(texts, work / f"{name}.jsonl", max_new_tokens), len(texts), add)
    return out


def bench_one(server, datasets: dict, conc: list[int], max_new_tokens: int, work: Path) -> list[dict]:
    rows = []
    for name, (path, n, add) in datasets.items():
        sub = work / server.name / name
        (sub / "warm").mkdir(parents=True, exist_ok=True)
        # warm-up: every prompt once at the top concurrency, short replies (prefill shapes, draft kernels)
        run_loads(server, dataset=path, num_prompts=n, max_new_tokens=16, concurrency=[max(conc)],
                  temperature=0.0, add_special_tokens=add, workdir=sub / "warm")
        runs = run_loads(server, dataset=path, num_prompts=n, max_new_tokens=max_new_tokens, concurrency=conc,
                         temperature=0.0, add_special_tokens=add, workdir=sub)
        for c, (saved, counters) in zip(conc, runs):
            row = make_row(server.cfg.method, server.cfg.k if server.cfg.method != "ar" else None, c, saved, counters)
            row.update(config=server.name, prompts=name, runner=server.runner, extra_args=server.extra,
                       outputs=[list(saved["generated_texts"]), list(saved["output_lens"])])
            rows.append(row)
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("stage", choices=sorted(STAGES))
    p.add_argument("--out", required=True)
    p.add_argument("--budget-s", type=float, default=520.0, help="start no configuration's load after this")
    p.add_argument("--sets", default="mt-bench:16", help="prompt sets, NAME:N,... (spread over each set)")
    p.add_argument("--concurrency", default="1,16")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--only", default="", help="comma list of configuration names (default: the whole stage)")
    args = p.parse_args()
    t0 = time.time()
    from transformers import AutoTokenizer

    from peagle_lab.assets import smollm2_dir
    from peagle_lab.bench import resolve_drafter
    from peagle_lab.materialise import materialise_for_vllm

    out, keep = Path(args.out), Path(os.environ.get("VRES", "/tmp/vres")) / args.stage
    out.mkdir(parents=True, exist_ok=True)
    keep.mkdir(parents=True, exist_ok=True)
    target = str(smollm2_dir())
    drafters = {m: str(materialise_for_vllm(resolve_drafter(m, None, True), target)) for m in ("eagle", "peagle")}
    conc = [int(c) for c in args.concurrency.split(",")]
    todo = [c for c in STAGES[args.stage] if (not args.only or c[0] in args.only.split(","))
            and not (keep / f"{c[0]}.json").exists()]
    work = Path("/tmp/vwork")
    work.mkdir(exist_ok=True)
    datasets = load_sets(AutoTokenizer.from_pretrained(target),
                         [(s.split(":")[0], int(s.split(":")[1])) for s in args.sets.split(",")],
                         args.max_new_tokens, work)
    servers = []
    for name, method, k, runner, extra in todo:
        cfg = ServeConfig(target=target, method=method, drafter=drafters.get(method), k=k or 1, dtype=DTYPE,
                          enforce_eager=False, memory_fraction=MEMORY_FRACTION,
                          extra_args=["--kv-cache-memory-bytes", str(KV_BYTES)] + extra)
        s = start(cfg, runner, work / f"server-{name}.log")
        s.name, s.runner, s.extra = name, runner, extra
        servers.append(s)
        time.sleep(2)
    print(f"[{time.time() - t0:5.0f} s] started {len(servers)} servers", flush=True)
    (out / "started").write_text(str(len(servers)))
    try:
        for s in servers:                    # every start finishes before any load: compiles would skew timings
            while not healthy(s):
                if time.time() - t0 > args.budget_s:
                    raise TimeoutError(f"{s.name} not ready within the budget")
                time.sleep(2)
            s.ready = time.time()
            print(f"[{time.time() - t0:5.0f} s] {s.name} ready after {s.ready - s.started:.0f} s", flush=True)
        for s in servers:
            if time.time() - t0 > args.budget_s:
                print(f"budget spent before {s.name}", flush=True)
                break
            print(f"[{time.time() - t0:5.0f} s] loading {s.name}", flush=True)
            rows = bench_one(s, datasets, conc, args.max_new_tokens, work)
            stop(s)
            record = {"config": s.name, "runner": s.runner, "command": s.cmd, "start_s": round(s.ready - s.started, 1),
                      "log_facts": log_facts(s.log_path.read_text(errors="replace")), "rows": rows}
            (keep / f"{s.name}.json").write_text(json.dumps(record, indent=1))
            write_summary(keep, out, args)          # one file in OUT, rewritten: a call cut short keeps it
            for r in rows:
                print(f"  {r['prompts']:<10} c={r['concurrency']:<3} {r['tokens_per_s']:8.0f} tok/s  "
                      f"TPOT {r['mean_tpot_ms'] or 0:.2f} ms  AL {r['acceptance_length'] or 0:.2f}", flush=True)
    finally:
        for s in servers:
            stop(s)
    return 0


def write_summary(keep: Path, out: Path, args) -> None:
    import torch

    records = [json.loads(f.read_text()) for f in sorted(keep.glob("*.json"))]
    rows = [r for rec in records for r in rec["rows"]]
    for name in {r["prompts"] for r in rows}:          # each speculative row against AR on its own runner
        for runner in {r["runner"] for r in rows}:
            group = [r for r in rows if r["prompts"] == name and r["runner"] == runner]
            mark_identical(group, [tuple(r["outputs"]) for r in group], greedy=True)
    summary = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": platform.node(),
               "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
               "vllm_version": vllm_version(), "torch": torch.__version__, "stage": args.stage,
               "command": "python benchmarks/gpu/vllm_cuda_sweep.py " + " ".join(sys.argv[1:]),
               "settings": {"sets": args.sets, "concurrency": args.concurrency, "max_new_tokens": args.max_new_tokens,
                            "dtype": DTYPE, "cuda_graphs": True, "kv_cache_memory_bytes": KV_BYTES,
                            "temperature": 0.0},
               "configs": [{k: v for k, v in rec.items() if k != "rows"} for rec in records],
               "results": [{k: v for k, v in r.items() if k != "outputs"} for r in rows]}
    (out / f"vllm_cuda_{args.stage}.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    sys.exit(main())
