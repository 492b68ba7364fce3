"""The fast engine on a GPU: `peagle-lab bench --engine fast` per dtype, transformers' static-cache
`generate` as a reference, and a merge into one raw JSON. Driven by `20_fast_engine.sh` (and, with
`--compile` and `pair`, by `23_fused_engine.sh`), one phase per process so a timeout or crash in one
phase keeps the others' results.

    python benchmarks/gpu/fast_engine_bench.py bench --dtype bfloat16 --budget 90 --out part_bf16.json
    python benchmarks/gpu/fast_engine_bench.py bench --dtype bfloat16 --compile --out part_fused.json
    python benchmarks/gpu/fast_engine_bench.py hf-static --dtype bfloat16 --out part_hf.json
    python benchmarks/gpu/fast_engine_bench.py merge --out fast_engine_h200.json part_*.json
    python benchmarks/gpu/fast_engine_bench.py pair --out fused_engine_h200.json part_plain.json part_fused*.json

Environment: KS (default 1,2,3,4,5,6,7,8), METHODS (ar,eagle,peagle), NUM_PROMPTS (12, spread over
MT-Bench), MAX_NEW (256), HF_PROMPTS (3; 0 skips the reference), AR_CHECK (0; N: a bench phase also
keeps the greedy AR tokens of the first N prompts, for `pair`), DEVICE (cuda; cpu for a dry run of the
plumbing).
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
METHODS = [m for m in ENV.get("METHODS", "ar,eagle,peagle").split(",") if m]
NUM_PROMPTS = int(ENV.get("NUM_PROMPTS", "12"))
MAX_NEW = int(ENV.get("MAX_NEW", "256"))
DEVICE = ENV.get("DEVICE", "cuda")
AR_CHECK = int(ENV.get("AR_CHECK", "0"))                  # cpu: a dry run of the script's plumbing


def write(path: str, data: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def graphs_report(target) -> list[dict]:
    from peagle_lab.engines.fast import engine as fe
    out = []
    for (method, _, k, config), eng in fe._ENGINES.get(target, {}).items():
        compiled = config.compile
        out.append({"method": method, "k": k, "max_len": config.max_len, "attention": config.attention,
                    "prompt_graphs": sorted(eng._prompt_steps) if eng.prompt_graphs else None,
                    "verify_captured": eng.verify.captured,
                    "draft_captured": None if eng.draft is None else eng.draft.captured,
                    "compile": compiled, "verify_compiled": eng.verify.compiled,
                    "draft_compiled": None if eng.draft is None else eng.draft.compiled,
                    "compile_s": eng.compile_s,
                    "reason": eng.verify.reason or (eng.draft.reason if eng.draft is not None else None)})
    return out


def ar_outputs(target, max_len: int, compile: bool | str, attention: str = "sdpa",
               prompt_graphs: bool = False) -> list[list[int]]:
    """Greedy AR tokens of the first $AR_CHECK prompts: `pair` compares compiled with plain. The fused
    kernels round differently (bf16), so a near-tie may flip and the two engines' greedy texts part."""
    from peagle_lab.engines.fast import generate_fast
    from peagle_lab.prompts import load_prompts

    prompts = load_prompts("mt-bench", NUM_PROMPTS, spread=True)[:AR_CHECK]
    return [generate_fast(target, target.chat_ids(p), method="ar", max_new_tokens=MAX_NEW, max_len=max_len,
                          compile=compile, attention=attention, prompt_graphs=prompt_graphs).tokens for p in prompts]


def cmd_bench(args) -> dict:
    from peagle_lab.bench import DTYPES, BenchSpec, run_bench
    from peagle_lab.engines.fast import FastConfig
    from peagle_lab.target import Target

    t0 = time.time()
    if args.no_cudnn_sdpa:                          # SDPA picks among flash / efficient / math instead
        torch.backends.cuda.enable_cudnn_sdp(False)
    target = Target.load(None, dtype=DTYPES[args.dtype], device=DEVICE)
    tag = (f"{args.dtype}{' compiled' if args.compile else ''}"
           f"{'' if args.compile in (True, False) else ' ' + args.compile}"
           f"{' triton-attention' if args.attention == 'triton' else ''}"
           f"{' no-cudnn-sdpa' if args.no_cudnn_sdpa else ''}"
           f"{' prompt-graphs' if args.prompt_graphs else ''}")
    print(f"[{tag}] target loaded in {time.time() - t0:.1f} s; {METHODS} K={KS}, "
          f"{NUM_PROMPTS} prompts x {MAX_NEW} tokens", flush=True)
    result = run_bench(BenchSpec(methods=METHODS, ks=KS, prompts="mt-bench", num_prompts=NUM_PROMPTS, spread=True,
                                 max_new_tokens=MAX_NEW, engine="fast", keep_going=True,
                                 time_budget_s=None if args.budget is None else args.budget - (time.time() - STARTED)),
                       FastConfig(compile=args.compile, attention=args.attention, prompt_graphs=args.prompt_graphs),
                       target=target, progress=True)
    result["graphs"] = graphs_report(target)
    result["settings"]["cudnn_sdpa"] = torch.backends.cuda.cudnn_sdp_enabled()
    if AR_CHECK:
        result["ar_tokens"] = ar_outputs(target, result["settings"]["max_len"], args.compile, args.attention,
                                         args.prompt_graphs)
    result["wall_s"] = time.time() - t0
    for r in result["results"]:
        split = r.get("step_split_ms") or {}
        print(f"[{tag}] {r['method']:6s} k={r['k']!s:4s} {r['tokens_per_s']:8.1f} tok/s  AL "
              f"{r['acceptance_length'] or 0:.2f}  identical {r['identical_to_ar']}  step ms: verify "
              f"{split.get('verify', 0):.3f} draft {split.get('draft', 0):.3f} host {split.get('host', 0):.3f}"
              + f"  warm-up {r['warmup_s']:.1f} s" + (f"  ERROR {r['error']}" if r.get("error") else ""), flush=True)
    print(f"[{tag}] floors: {json.dumps(result.get('floors'))}", flush=True)
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


def _header(script: str) -> dict:
    """What every merged JSON starts with: the command, date, machine, versions, settings and info."""
    from peagle_lab.info import collect

    merged = {"command": ENV.get("COMMAND", f"bash benchmarks/gpu/{script}"),
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
    return merged


def _parts(paths: list[str], merged: dict):
    """``(name, data)`` for each phase's JSON that exists and holds no error; the others go to ``errors``."""
    for part in paths:
        name = Path(part).stem
        if not Path(part).exists():
            merged["errors"][name] = "missing (the phase timed out or crashed before writing; see the log)"
            continue
        data = json.loads(Path(part).read_text())
        if "error" in data:
            merged["errors"][name] = data["error"]
        else:
            yield name, data


def cmd_merge(args) -> dict:
    merged = _header("20_fast_engine.sh")
    for name, data in _parts(args.parts, merged):
        if data.get("method") == "hf-static":
            merged["references"].append(data)
        else:
            dtype = data["settings"]["dtype"]
            merged["runs"][dtype] = data
            merged["results"] += [dict(r, dtype=dtype) for r in data["results"]]
    return merged


def _side(row: dict | None) -> dict | None:
    keys = ("tokens_per_s", "acceptance_length", "identical_to_ar", "num_prompts", "step_split_ms", "warmup_s", "error")
    return None if row is None else {key: row.get(key) for key in keys}


def _pair(method: str, k, plain: dict | None, fused: dict | None, mode: str = "default") -> dict:
    """One configuration, compile off and on (inductor ``mode``): both rows' essentials and on/off ratios
    (tokens/s, step parts)."""
    out = {"method": method, "k": k, "mode": mode, "plain": _side(plain), "compiled": _side(fused)}
    if plain and fused and plain.get("num_prompts") != fused.get("num_prompts"):
        # a time budget cut one side short: its tokens/s and acceptance come from other prompts, so no ratio
        out["not_comparable"] = (f"{plain.get('num_prompts')} prompts off vs {fused.get('num_prompts')} on "
                                 "(a time budget ran out): raise TOTAL_S or lower NUM_PROMPTS / MAX_NEW")
        return out
    if plain and fused and plain["tokens_per_s"] and fused["tokens_per_s"]:
        out["speedup"] = fused["tokens_per_s"] / plain["tokens_per_s"]
        a, b = plain.get("step_split_ms") or {}, fused.get("step_split_ms") or {}
        parts = ("verify", "host") if method == "ar" else ("verify", "draft", "host")   # AR drafts nothing
        out["step_ms_ratio"] = {key: b[key] / a[key] for key in parts if a.get(key) and key in b}
    return out


def _mode(settings: dict) -> str:
    """A bench part's settings as a side's name: plain, default or the inductor mode (the compile setting),
    with ``+triton`` when the fast engine's attention was the Triton kernel and ``+nocudnn`` when SDPA ran
    without its cuDNN backend (``plain`` alone: the reference)."""
    c = settings.get("compile")
    name = "plain" if not c else "default" if c is True else str(c)
    return (name + ("+triton" if settings.get("attention") == "triton" else "")
            + ("+nocudnn" if settings.get("cudnn_sdpa") is False else "")
            + ("+pgraph" if settings.get("prompt_graphs") else ""))


def _same_tokens(runs: list[dict], mode: str = "default") -> dict | None:
    """Per checked prompt: do plain and compiled (``mode``) greedy AR agree, and where do they first part?"""
    plain = next((r["ar_tokens"] for r in runs if "ar_tokens" in r and _mode(r["settings"]) == "plain"), None)
    fused = next((r["ar_tokens"] for r in runs if "ar_tokens" in r and _mode(r["settings"]) == mode), None)
    if plain is None or fused is None:
        return None
    def first_difference(p: list[int], f: list[int]) -> int | None:
        at_end = None if len(p) == len(f) else min(len(p), len(f))
        return next((i for i, (a, b) in enumerate(zip(p, f)) if a != b), at_end)

    first = [first_difference(p, f) for p, f in zip(plain, fused)]
    return {"prompts": len(first), "identical": sum(i is None for i in first), "first_difference_at": first}


def cmd_pair(args) -> dict:
    """23_fused_engine.sh: the plain phase (compile off, sdpa attention) and every other variant's phases
    (compiled, Triton attention, or both) side by side, a pair per (variant, method, K). AR runs in every
    variant's phase (the reference of its K's rows); the pair keeps the first."""
    merged = _header("23_fused_engine.sh")
    rows: dict = {}
    modes: list[str] = []                          # compiled modes in the order their parts came
    for name, data in _parts(args.parts, merged):
        merged["runs"][name] = data
        mode = _mode(data["settings"])
        if mode != "plain" and mode not in modes:
            modes.append(mode)
        compiled = bool(data["settings"].get("compile"))           # (mode also names +triton / +nocudnn)
        for r in data["results"]:
            merged["results"].append(dict(r, dtype=data["settings"]["dtype"], compile=compiled, mode=mode,
                                          compile_mode=mode.split("+")[0] if compiled else None,
                                          attention=data["settings"].get("attention") or "sdpa", part=name))
            rows.setdefault((r["method"], r["k"]), {}).setdefault(mode, r)
    merged["pairs"] = [_pair(m, k, sides.get("plain"), sides.get(mode), mode)
                       for mode in modes for (m, k), sides in rows.items() if mode in sides]
    runs = list(merged["runs"].values())
    merged["ar_plain_vs_compiled"] = _same_tokens(runs, modes[0]) if modes else None
    if len(modes) > 1:
        merged["ar_plain_vs_compiled_by_mode"] = {mode: _same_tokens(runs, mode) for mode in modes}
    for p in merged["pairs"]:
        tps = [f"{(p[side] or {}).get('tokens_per_s') or 0:8.1f}" for side in ("plain", "compiled")]
        ratios = {k: round(v, 3) for k, v in p.get('step_ms_ratio', {}).items()}
        print(f"[pair {p['mode']}] {p['method']:6s} k={p['k']!s:4s} tok/s off {tps[0]} on {tps[1]}  "
              f"x{p.get('speedup', 0):.2f}  step ratios {json.dumps(ratios)}"
              + (f"  NOT COMPARABLE: {p['not_comparable']}" if "not_comparable" in p else ""), flush=True)
    return merged


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=["bench", "hf-static", "merge", "pair"])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--budget", type=float, default=None,
                    help="bench: start no new round of prompts this many s after the process started")
    ap.add_argument("--compile", nargs="?", const=True, default=False, metavar="MODE",
                    help="bench: fuse the fast engine's steps with torch.compile (MODE: default or "
                         "max-autotune-no-cudagraphs)")
    ap.add_argument("--attention", default="sdpa", choices=["sdpa", "triton"],
                    help="bench: the fast engine's attention over the target's cache")
    ap.add_argument("--prompt-graphs", action="store_true",
                    help="bench: the prompt's pass padded to 64-token buckets, one captured graph per bucket (the "
                         "engine's default on CUDA; off here so that plain stays the eager prompt pass)")
    ap.add_argument("--no-cudnn-sdpa", action="store_true",
                    help="bench: turn off SDPA's cuDNN backend (torch.backends.cuda.enable_cudnn_sdp(False))")
    ap.add_argument("--out", required=True)
    ap.add_argument("parts", nargs="*")
    args = ap.parse_intermixed_args()
    fn = {"bench": cmd_bench, "hf-static": cmd_hf_static, "merge": cmd_merge, "pair": cmd_pair}[args.phase]
    try:
        data = fn(args)
    except (Exception, SystemExit) as err:  # noqa: BLE001 -- the phase's error (a refused setting too) goes in its JSON
        traceback.print_exc()
        print(f"[{args.phase} {args.dtype}] ERROR {type(err).__name__}: {err}", flush=True)
        data = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-4000:]}
    write(args.out, data)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
