"""DSpark in CUDA vLLM beside AR, EAGLE-3 and P-EAGLE, c=1 repeated in interleaved rounds.

    python lab/dspark/serve.py --dspark DIR --out F.json [--rounds 3] [--sets mt-bench:16]

Every server starts at once (a small fixed KV cache each; CUDA graphs, bf16), then ONE client process runs a
plan that visits every server in turn: a warm-up each, ``--rounds`` rounds of c=1 (the order rotated each round,
so machine noise hits all alike), then c=4 and c=16 once each. A float32 DSpark server serves the same prompts
once at c=1 for the cross-check of vLLM's acceptance counters against the teaching engine's replay.
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

from peagle_lab.serving.bench import (BENCH_SERVE, bench_serve_args, make_row, mark_identical, render_prompts,
                                      vllm_version, write_dataset)
from peagle_lab.serving.server import ServeConfig, free_port, serve_command, server_env

KV = ["--kv-cache-memory-bytes", str(3 << 30)]
# (name, method, K, runner, dtype): AR on both runners, each method on the runner it serves on, EAGLE-3 on both
CONFIGS = [("ar-v1", "ar", None, "v1", "bfloat16"), ("ar-v2", "ar", None, "v2", "bfloat16"),
           ("eagle-k3-v2", "eagle", 3, "v2", "bfloat16"), ("eagle-k3-v1", "eagle", 3, "v1", "bfloat16"),
           ("peagle-k3-v1", "peagle", 3, "v1", "bfloat16"),
           ("dspark-k3-v2", "dspark", 3, "v2", "bfloat16"), ("dspark-k5-v2", "dspark", 5, "v2", "bfloat16"),
           ("dspark-k7-v2", "dspark", 7, "v2", "bfloat16"), ("dspark-k7-v2-fp32", "dspark", 7, "v2", "float32")]


def start(name, method, k, runner, dtype, drafters, target, work: Path):
    cfg = ServeConfig(target=target, method=method, drafter=drafters.get(method), k=k or 1, dtype=dtype,
                      enforce_eager=False, memory_fraction=0.05, model_runner=runner, extra_args=KV)
    port = free_port()
    cmd = serve_command(cfg, port)
    log = work / f"server-{name}.log"
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, **server_env(cfg)), start_new_session=True)
    return SimpleNamespace(name=name, cfg=cfg, url=f"http://127.0.0.1:{port}", proc=proc, cmd=cmd, log=log,
                           runner=runner, started=time.time())


def ready(s) -> bool:
    if s.proc.poll() is not None:
        raise RuntimeError(f"{s.name}: vLLM exited:\n" + s.log.read_text(errors="replace")[-3000:])
    try:
        with urllib.request.urlopen(s.url + "/v1/models", timeout=2) as r:
            return s.cfg.target in r.read().decode()
    except OSError:
        return False


def entry(s, tag: str, c: int, new: int, data: tuple, work: Path) -> dict:
    path, n, add = data
    return {"argv": bench_serve_args(base_url=s.url, model=s.cfg.target, dataset=path, num_prompts=n,
                                     max_new_tokens=new, concurrency=c, temperature=0.0, result_dir=work,
                                     result_name=f"{s.name}-{tag}.json", add_special_tokens=add),
            "metrics_url": s.url + "/metrics", "counters_out": str(work / f"{s.name}-{tag}.counters.json"),
            "_server": s.name, "_tag": tag, "_c": c}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dspark", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sets", default="mt-bench:16")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--only", default="")
    p.add_argument("--gate", default=None, help="start the servers, then wait for this file before any load")
    args = p.parse_args()
    from transformers import AutoTokenizer

    from peagle_lab.assets import smollm2_dir
    from peagle_lab.bench import resolve_drafter
    from peagle_lab.materialise import materialise_for_vllm
    from peagle_lab.prompts import load_prompts

    t0, work = time.time(), Path("/tmp/dswork")
    work.mkdir(exist_ok=True)
    target = str(smollm2_dir())
    drafters = {m: str(materialise_for_vllm(resolve_drafter(m, None, True), target)) for m in ("eagle", "peagle")}
    drafters["dspark"] = args.dspark
    name, n = args.sets.split(":")
    texts, add = render_prompts(AutoTokenizer.from_pretrained(target), load_prompts(name, int(n), spread=True))
    data = (write_dataset(texts, work / f"{name}.jsonl", args.max_new_tokens), len(texts), add)
    configs = [c for c in CONFIGS if not args.only or c[0] in args.only.split(",")]
    servers = []
    for c in configs:
        servers.append(start(*c, drafters, target, work))
        time.sleep(2)
    for s in servers:
        while not ready(s):
            time.sleep(2)
        s.ready = time.time()
        print(f"[{time.time() - t0:5.0f} s] {s.name} ready after {s.ready - s.started:.0f} s", flush=True)
    while args.gate and not Path(args.gate).exists():     # another GPU job (the replay) finishes first
        time.sleep(2)
    print(f"[{time.time() - t0:5.0f} s] loads start", flush=True)
    timed = [s for s in servers if not s.name.endswith("fp32")]
    plan = [entry(s, "warm", 16, 16, data, work) for s in servers]
    for r in range(args.rounds):
        order = timed[r % len(timed):] + timed[: r % len(timed)]
        plan += [entry(s, f"c1-r{r}", 1, args.max_new_tokens, data, work) for s in order]
    plan += [entry(s, "c1-xcheck", 1, args.max_new_tokens, data, work) for s in servers if s.name.endswith("fp32")]
    plan += [entry(s, f"c{c}", c, args.max_new_tokens, data, work) for c in (4, 16) for s in timed]
    (work / "plan.json").write_text(json.dumps([{k: v for k, v in e.items() if not k.startswith("_")} for e in plan]))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(work / "bench.log", "w") as log:
        rc = subprocess.run(BENCH_SERVE + ["--plan", str(work / "plan.json")], stdout=log, stderr=subprocess.STDOUT,
                            env=env).returncode
    for s in servers:
        os.killpg(s.proc.pid, 15)
    rows, by_name = [], {s.name: s for s in servers}
    for e in plan:
        if e["_tag"] == "warm":
            continue
        f = work / f"{e['_server']}-{e['_tag']}.json"
        if not f.exists():
            continue
        s, saved = by_name[e["_server"]], json.loads(f.read_text())
        counters = json.loads(Path(e["counters_out"]).read_text()) if Path(e["counters_out"]).exists() else {}
        row = make_row(s.cfg.method, s.cfg.k if s.cfg.method != "ar" else None, e["_c"], saved, counters)
        row.update(config=s.name, runner=s.runner, dtype=s.cfg.dtype, run=e["_tag"],
                   outputs=[list(saved.get("generated_texts", [])), list(saved.get("output_lens", []))])
        rows.append(row)
    for runner in ("v1", "v2"):                     # greedy output against AR on the same runner, same round
        for tag in {r["run"] for r in rows}:
            group = [r for r in rows if r["runner"] == runner and r["run"] == tag and r["dtype"] == "bfloat16"]
            if any(r["method"] == "ar" for r in group):
                mark_identical(group, [tuple(r["outputs"]) for r in group], greedy=True)
    import torch

    out = {"command": "python lab/dspark/serve.py " + " ".join(sys.argv[1:]), "rc": rc,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": platform.node(),
           "gpu": torch.cuda.get_device_name(0), "vllm_version": vllm_version(), "torch": torch.__version__,
           "settings": {"sets": args.sets, "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
                        "cuda_graphs": True, "temperature": 0.0, "kv_cache_bytes": 3 << 30},
           "configs": [{"config": s.name, "command": s.cmd, "runner": s.runner,
                        "start_s": round(s.ready - s.started, 1)} for s in servers],
           "results": [{k: v for k, v in r.items() if k != "outputs"} for r in rows]}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"[{time.time() - t0:5.0f} s] done, rc {rc}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
