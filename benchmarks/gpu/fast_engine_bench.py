"""The fast engine on a GPU: `peagle-lab bench --engine fast` per dtype, transformers' static-cache
`generate` as a reference, and a merge into one raw JSON. Driven by `20_fast_engine.sh`, one phase per
process so a timeout or crash in one phase keeps the others' results.

    python benchmarks/gpu/fast_engine_bench.py bench --dtype bfloat16 --budget 90 --out part_bf16.json
    python benchmarks/gpu/fast_engine_bench.py hf-static --dtype bfloat16 --out part_hf.json
    python benchmarks/gpu/fast_engine_bench.py merge --out fast_engine_h200.json part_*.json

Environment: KS (default 1,2,3,4,5,6,7,8), NUM_PROMPTS (12, spread over MT-Bench), MAX_NEW (256),
HF_PROMPTS (3; 0 skips the reference), DEVICE (cuda; cpu for a dry run of the plumbing).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

STARTED = time.time()
ENV = os.environ
KS = [int(k) for k in ENV.get("KS", "1,2,3,4,5,6,7,8").split(",") if k]
NUM_PROMPTS = int(ENV.get("NUM_PROMPTS", "12"))
MAX_NEW = int(ENV.get("MAX_NEW", "256"))
DEVICE = ENV.get("DEVICE", "cuda")                  # cpu: a dry run of the script's plumbing


def write(path: str, data: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def graphs_report(target) -> list[dict]:
    from peagle_lab.fast import engine as fe
    out = []
    for (method, _, k, max_len, capture), eng in fe._ENGINES.get(target, {}).items():
        out.append({"method": method, "k": k, "max_len": max_len, "verify_captured": eng.verify.captured,
                    "draft_captured": None if eng.draft is None else eng.draft.captured,
                    "reason": eng.verify.reason or (eng.draft.reason if eng.draft is not None else None)})
    return out


def cmd_bench(args) -> dict:
    from peagle_lab.bench import DTYPES, run_bench
    from peagle_lab.target import Target

    t0 = time.time()
    target = Target.load(None, dtype=DTYPES[args.dtype], device=DEVICE)
    print(f"[{args.dtype}] target loaded in {time.time() - t0:.1f} s; K={KS}, {NUM_PROMPTS} prompts x {MAX_NEW} tokens", flush=True)
    result = run_bench(methods=["ar", "eagle", "peagle"], ks=KS, prompts="mt-bench", num_prompts=NUM_PROMPTS,
                       spread=True, max_new_tokens=MAX_NEW, target=target, engine="fast", keep_going=True,
                       time_budget_s=None if args.budget is None else args.budget - (time.time() - STARTED),
                       progress=True)
    result["graphs"] = graphs_report(target)
    result["wall_s"] = time.time() - t0
    for r in result["results"]:
        split = r.get("step_split_ms") or {}
        print(f"[{args.dtype}] {r['method']:6s} k={r['k']!s:4s} {r['tokens_per_s']:8.1f} tok/s  AL "
              f"{r['acceptance_length'] or 0:.2f}  identical {r['identical_to_ar']}  step ms: verify "
              f"{split.get('verify', 0):.3f} draft {split.get('draft', 0):.3f} host {split.get('host', 0):.3f}"
              + (f"  ERROR {r['error']}" if r.get("error") else ""), flush=True)
    print(f"[{args.dtype}] floors: {json.dumps(result.get('floors'))}", flush=True)
    return result


def cmd_hf_static(args) -> dict:
    """transformers' generate with cache_implementation="static" (it compiles the forward): the bar to beat."""
    from peagle_lab.bench import DTYPES
    from peagle_lab.prompts import load_prompts
    from peagle_lab.target import Target

    n = int(ENV.get("HF_PROMPTS", "3"))
    if n < 1:
        return {"method": "hf-static", "skipped": "HF_PROMPTS=0"}
    target = Target.load(None, dtype=DTYPES[args.dtype], device=DEVICE)
    prompts = [target.chat_ids(p) for p in load_prompts("mt-bench", NUM_PROMPTS, spread=True)][:n]
    eos = list(target.eos_token_ids)

    def gen(ids):
        x = torch.tensor([ids], device=DEVICE)
        sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
        sync()
        t = time.perf_counter()
        out = target.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_NEW, do_sample=False,
                                    cache_implementation="static", eos_token_id=eos, pad_token_id=eos[0])
        sync()
        return out.shape[1] - len(ids), time.perf_counter() - t

    longest = max(prompts, key=len)
    t0 = time.time()
    gen(longest)                                    # compiles (and sizes the static cache for the longest prompt)
    compile_s = time.time() - t0
    print(f"[hf-static {args.dtype}] warm-up (compile) {compile_s:.1f} s", flush=True)
    tokens = seconds = 0.0
    for ids in prompts:
        n_tok, s = gen(ids)
        tokens, seconds = tokens + n_tok, seconds + s
        print(f"[hf-static {args.dtype}] {n_tok} tokens in {s:.2f} s", flush=True)
    return {"method": "hf-static", "dtype": args.dtype, "num_prompts": len(prompts), "new_tokens": tokens,
            "seconds": seconds, "tokens_per_s": tokens / seconds if seconds else 0.0, "warmup_compile_s": compile_s}


def cmd_merge(args) -> dict:
    from peagle_lab.info import collect

    merged = {"command": ENV.get("COMMAND", "bash benchmarks/gpu/20_fast_engine.sh"),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device",
              "versions": {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "transformers": __import__("transformers").__version__},
              "settings": {"ks": KS, "num_prompts": NUM_PROMPTS, "max_new_tokens": MAX_NEW, "temperature": 0.0,
                           "prompts": "mt-bench (spread)", "batch_size": 1},
              "results": [], "runs": {}, "references": [], "errors": {}}
    try:
        import triton
        merged["versions"]["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        merged["info"] = collect(count_prompts=False)
    except Exception as err:  # noqa: BLE001
        merged["info"] = {"error": repr(err)}
    for part in args.parts:
        name = Path(part).stem
        if not Path(part).exists():
            merged["errors"][name] = "missing (the phase timed out or crashed before writing; see the log)"
            continue
        data = json.loads(Path(part).read_text())
        if "error" in data:
            merged["errors"][name] = data["error"]
        elif data.get("method") == "hf-static":
            merged["references"].append(data)
        else:
            dtype = data["settings"]["dtype"]
            merged["runs"][dtype] = data
            merged["results"] += [dict(r, dtype=dtype) for r in data["results"]]
    return merged


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=["bench", "hf-static", "merge"])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--budget", type=float, default=None,
                    help="bench: start no new round of prompts this many s after the process started")
    ap.add_argument("--out", required=True)
    ap.add_argument("parts", nargs="*")
    args = ap.parse_intermixed_args()
    fn = {"bench": cmd_bench, "hf-static": cmd_hf_static, "merge": cmd_merge}[args.phase]
    try:
        data = fn(args)
    except Exception as err:  # noqa: BLE001 -- the phase's error goes into its JSON; the script goes on
        traceback.print_exc()
        print(f"[{args.phase} {args.dtype}] ERROR {type(err).__name__}: {err}", flush=True)
        data = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-4000:]}
    write(args.out, data)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
