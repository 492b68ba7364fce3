"""Where one captured step's time goes on a GPU: kernels per step and their summed device time, against
the time the captured graph takes to replay -- per step of the fast engine (AR decode, P-EAGLE verify of
K+1 tokens and its one drafting pass, EAGLE-3's K drafting passes), plain and fused by torch.compile.

If the kernels' summed time is close to the replay time, the step is kernel-bound (faster or fewer
kernels are the lever: fusion, autotuned matmuls, a cheaper attention); if it is well below, the gaps
between kernels inside the graph are (fewer kernels). The top kernels by time say which.

    python benchmarks/gpu/step_profile.py --out step_profile.json --modes plain,default --k 7

Needs CUDA (the target in bf16 by default). Each configuration's error is recorded in the JSON and the
others go on. The step runs uncaptured under the profiler (the compiled function when fused: the same
kernels the graph holds), then as a graph replay for its time.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PROMPT = "Explain in three sentences why the sky is blue."


def kernel_events(prof) -> list[tuple[str, float]]:
    """(name, device microseconds) of every GPU activity (kernels, memsets, copies) the profiler saw. User
    annotations are left out: they share the CUDA device type, and inductor wraps each compiled graph's call
    in one (``## Call CompiledFxGraph ... ##``) spanning all its kernels, which would count them twice."""
    cuda = torch.autograd.DeviceType.CUDA
    return [(e.name(), e.duration_ns() / 1e3) for e in prof.profiler.kineto_results.events()
            if e.device_type() == cuda and not getattr(e, "is_user_annotation", lambda: False)()]


def _family(name: str) -> str:
    """A kernel name folded into a family a reader can act on."""
    n = name.lower()
    # attention first: cuDNN's SDPA kernels have sm90 / wgmma in their names too (filed under matmul they were
    # 0.5 ms of the AR step's 0.98 "matmul" ms on the H200); peagle_lab's own split kernels next
    for key, fam in (("triton_poi", "fused (triton)"),         # inductor's pointwise kernels, named after any op
                     ("sdpa", "attention"), ("flash", "attention"), ("fmha", "attention"), ("attention", "attention"),
                     ("_split_body", "attention (peagle triton)"), ("_combine_body", "attention (peagle triton)"),
                     ("gemv", "matmul"), ("gemm", "matmul"), ("cutlass", "matmul"), ("sm90", "matmul"),
                     ("ampere", "matmul"), ("triton_tem", "matmul (triton template)"), ("mm", "matmul"),
                     ("triton", "fused (triton)"), ("index", "copy/index"), ("copy", "copy/index"),
                     ("cat", "copy/index"), ("reduce", "reduction"), ("elementwise", "elementwise")):
        if key in n:
            return fam
    return "other"


def profile_step(fn, reps: int) -> dict:
    """Kernels of ``reps`` calls of ``fn`` (uncaptured): count and summed device time per call, by family."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    ev = kernel_events(prof)
    by_name, by_family = defaultdict(lambda: [0, 0.0]), defaultdict(lambda: [0, 0.0])
    for name, us in ev:
        for table, key in ((by_name, name), (by_family, _family(name))):
            table[key][0] += 1
            table[key][1] += us
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:12]
    return {"kernels_per_step": len(ev) / reps, "kernel_ms_per_step": sum(us for _, us in ev) / reps / 1e3,
            "by_family": {f: {"kernels_per_step": c / reps, "ms_per_step": us / reps / 1e3}
                          for f, (c, us) in sorted(by_family.items(), key=lambda kv: -kv[1][1])},
            "top_kernels": [{"name": n[:160], "calls_per_step": c / reps, "ms_per_step": us / reps / 1e3}
                            for n, (c, us) in top]}


def replay_ms(step, reps: int) -> float:
    """Mean time of ``reps`` back-to-back calls of the (captured) step, CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    step()
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def unseen_lengths(eng, prompt: list[int]) -> dict:
    """Wall ms of the prompt's pass at lengths not run before: with every SDPA backend allowed, then with
    cuDNN's left out (cuDNN builds an execution plan per new shape, which a prompt of a new length pays)."""
    def timed(cuts):
        out = []
        for cut in cuts:
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            eng._prefill(prompt[:-cut])
            torch.cuda.synchronize()
            out.append(1e3 * (time.perf_counter() - t1))
        return out

    if eng.prompt_graphs:                           # one bucket holds every cut: nothing would be unseen
        return {"unseen_length_note": "skipped: +pgraph pads every cut to one captured bucket"}
    eng.prompt_skips_cudnn = False      # the engine leaves cuDNN out of the prompt: here with it, then without
    try:
        res = {"unseen_length_ms": timed((1, 2, 3))}
        cudnn = torch.backends.cuda.cudnn_sdp_enabled()
        torch.backends.cuda.enable_cudnn_sdp(False)
        try:
            res["unseen_length_ms_without_cudnn_sdpa"] = timed((4, 5, 6))
        finally:
            torch.backends.cuda.enable_cudnn_sdp(cudnn)
    finally:
        eng.prompt_skips_cudnn = True
    return res


class _Prefill:
    """The prompt's pass as a step: eager at its own length, or with +pgraph the engine's captured bucket graph
    (``fn`` replays it)."""

    compiled = False

    def __init__(self, eng, prompt):
        self.fn = lambda: eng._prefill(prompt)
        self.captured = eng.prompt_graphs

    def __call__(self):
        self.fn()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--modes", default="plain,default",
                    help="comma list of plain, default, max-autotune-no-cudagraphs, each optionally +triton (the "
                         "target's attention by peagle_lab's Triton kernel instead of SDPA), +pgraph (the prompt's "
                         "pass in captured bucket graphs) and/or +nocudnn (SDPA without its cuDNN backend), "
                         "e.g. plain,plain+triton,plain+nocudnn")
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--reps", type=int, default=20, help="profiled calls per step")
    ap.add_argument("--replays", type=int, default=40, help="timed graph replays per step")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("step_profile.py measures CUDA kernels: run it on a machine with a CUDA GPU")

    from peagle_lab.bench import BenchSpec, _load_drafters
    from peagle_lab.device import DTYPES
    from peagle_lab.engines.fast import engine as fe
    from peagle_lab.engines.fast import FastConfig
    from peagle_lab.engines.fast.engine import fast_engine
    from peagle_lab.engines.fast.graphs import launch_floor_us
    from peagle_lab.target import Target

    target = Target.load(None, dtype=DTYPES[args.dtype], device="cuda")
    drafters = _load_drafters(BenchSpec(methods=("eagle", "peagle")), target)
    prompt = target.chat_ids(PROMPT)
    # replays move the cache lengths forward by <= K+1 a call: room for warm-up, profile and replays
    max_len = -(-(len(prompt) + 64 + (args.k + 1) * (2 * args.reps + args.replays + 8)) // 64) * 64
    out = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": torch.cuda.get_device_name(), "versions": {"torch": torch.__version__},
           "command": "python benchmarks/gpu/step_profile.py " + " ".join(sys.argv[1:]),
           "what": "kernels per captured step and their summed device time vs the graph's replay time",
           "settings": {"k": args.k, "dtype": args.dtype, "reps": args.reps, "replays": args.replays,
                        "max_len": max_len},
           "launch_floor_us": launch_floor_us(), "rows": []}
    # prefill: the prompt's eager pass (target + P-EAGLE's first drafting) -- on the H200 it took 60-98 ms a prompt,
    # 25-37% of the compiled engine's wall time (fused_engine_h200.json's time_split_s), so it is profiled too
    configs = [("ar", 0, "verify"), ("peagle", args.k, "verify"), ("peagle", args.k, "draft"),
               ("eagle", args.k, "draft"), ("peagle", args.k, "prefill")]
    for mode in args.modes.split(","):
        base, *extras = mode.split("+")
        attention = "triton" if "triton" in extras else "sdpa"
        compile = False if base == "plain" else True if base == "default" else base
        if torch.backends.cuda.cudnn_sdp_enabled() == ("nocudnn" in extras):   # +nocudnn: SDPA without cuDNN;
            torch.backends.cuda.enable_cudnn_sdp("nocudnn" not in extras)     # captured graphs keep the kernels
            fe._ENGINES.pop(target, None)                                     # they saw: build them anew
        for method, k, step_name in configs:
            row = {"mode": mode, "attention": attention, "method": method, "k": k or None, "step": step_name,
                   "tokens_per_verify": (k + 1) if step_name == "verify" else None}
            t0 = time.time()
            try:
                with torch.inference_mode():                              # as generate_fast builds its engines
                    eng = fast_engine(target, method, drafters.get(method), k,
                                      FastConfig(max_len=max_len, capture=True, compile=compile, attention=attention,
                                                 prompt_graphs="pgraph" in extras))
                    step = {"verify": eng.verify, "draft": eng.draft, "prefill": _Prefill(eng, prompt)}[step_name]
                    row["build_s"] = time.time() - t0
                    if step_name == "prefill":
                        row["prompt_tokens"] = len(prompt)
                    eng.generate(prompt, 16, time_split=False)            # state as in decoding
                    row.update(profile_step(step.fn, args.reps))
                    eng.generate(prompt, 16, time_split=False)
                    row["replay_ms"] = replay_ms(step, args.replays)
                    if step_name == "prefill":                            # a length not seen before: per-shape costs
                        row.update(unseen_lengths(eng, prompt))           # (library plans, memory requests) show here
                row["captured"], row["compiled"] = step.captured, step.compiled
                replay = row["replay_ms"]
                row["kernel_share_of_replay"] = row["kernel_ms_per_step"] / replay if replay else None
            except Exception as err:  # noqa: BLE001 -- recorded, the next configuration runs
                traceback.print_exc()
                row["error"] = f"{type(err).__name__}: {err}"
            out["rows"].append(row)
            fam = ", ".join(f"{f} {v['kernels_per_step']:.0f}x {v['ms_per_step']:.3f}" for f, v in
                            list(row.get("by_family", {}).items())[:5])
            print(f"[{mode}] {method:6s} {step_name:6s} kernels/step {row.get('kernels_per_step', 0):6.1f}  kernel ms "
                  f"{row.get('kernel_ms_per_step', 0):.3f}  replay ms {row.get('replay_ms', 0):.3f}  | {fam}"
                  + (f"  unseen lengths ms {[round(x, 1) for x in row['unseen_length_ms']]}, without cuDNN SDPA "
                     f"{[round(x, 1) for x in row['unseen_length_ms_without_cudnn_sdpa']]}"
                     if "unseen_length_ms" in row else "")
                  + (f"  ERROR {row['error']}" if "error" in row else ""), flush=True)
            Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
