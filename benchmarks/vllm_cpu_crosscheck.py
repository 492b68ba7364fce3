"""A drafter in vLLM's CPU build beside the teaching engine: the same prompts, chat template, token budget and K at
T=0, in float32. vLLM's spec-decode counters and the teaching engine's must agree position by position (equal in
float32), and vLLM's greedy output must not change with speculation. Run it on a drafter before shipping it.

    python benchmarks/vllm_cpu_crosscheck.py --drafter peagle=runs/peagle-drafter --k 7 --num-prompts 4 \\
        --json benchmarks/results/vllm_cpu_crosscheck_<name>.json

Needs vLLM's CPU build (`make setup`); a few minutes on a 2-core CPU (one vLLM server per method and K)."""
from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path


def crosscheck(method: str, drafter: str, k: int, num_prompts: int, max_new_tokens: int) -> dict:
    from peagle_lab.bench import BenchSpec, run_bench
    from peagle_lab.serving.bench import run_vllm_bench, vllm_version

    served = run_vllm_bench(methods=["ar", method], ks=[k], concurrency=[1], prompts="mt-bench",
                            num_prompts=num_prompts, max_new_tokens=max_new_tokens, spread=True,
                            **{f"{method}_drafter": drafter}, progress=False)
    v = next(r for r in served["results"] if r["method"] == method)
    t = run_bench(BenchSpec(methods=[method], ks=[k], prompts="mt-bench", num_prompts=num_prompts, spread=True,
                            max_new_tokens=max_new_tokens, drafters={method: drafter}), progress=False)["results"][0]
    gaps = [abs(a - b) for a, b in zip(v["acceptance_per_position"], t["acceptance_per_position"])]
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()} ({__import__('os').cpu_count()} CPUs), {vllm_version()} CPU build",
            "command": "python " + " ".join(sys.argv), "method": method, "drafter": drafter, "k": k,
            "prompts": f"mt-bench, {num_prompts} spread", "max_new_tokens": max_new_tokens,
            "vllm": {key: v[key] for key in ("acceptance_length", "acceptance_per_position", "identical_to_ar",
                                             "tokens_per_s")},
            "teaching_engine": {key: t[key] for key in ("acceptance_length", "acceptance_per_position")},
            "max_abs_gap_per_position": max(gaps), "agree": max(gaps) <= 0.05 and v["identical_to_ar"] is True}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", required=True, help="METHOD=DIR, e.g. peagle=runs/peagle-drafter")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--json", help="where to write the result")
    args = ap.parse_args()
    method, _, folder = args.drafter.partition("=")
    if method not in ("eagle", "peagle") or not folder or not (Path(folder) / "config.json").is_file():
        sys.exit(f"--drafter {args.drafter!r}: give METHOD=DIR with METHOD eagle or peagle and DIR a drafter folder "
                 "(one with a config.json)")
    result = crosscheck(method, folder, args.k, args.num_prompts, args.max_new_tokens)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    sys.exit(0 if result["agree"] else 1)


if __name__ == "__main__":
    main()
