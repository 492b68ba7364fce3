"""DSpark's acceptance beside the shipped pair, replayed on one set of greedy replies (GPU or CPU).

    python lab/dspark/eval.py --drafters dspark=DIR dflash=DIR eagle=peagle_lab/drafters/eagle-smollm2 ... --out F.json

One greedy reply per prompt (80 MT-Bench first turns, 128 new tokens + 8 to spare), then every drafter replayed
on it at K = 3, 5, 7 (what ``peagle-lab eval`` reports, one K per call there); and the cross-check slice: the
first ``--xcheck`` spread prompts at 256 tokens and K=7, the prompts the CUDA vLLM run serves in float32.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from peagle_lab.checkpoint import load_drafter
from peagle_lab.prompts import load_prompts
from peagle_lab.target import Target
from peagle_lab.train.replay import evaluate_drafters, greedy_replies


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--drafters", nargs="+", required=True, help="NAME=DIR ...")
    p.add_argument("--out", required=True)
    p.add_argument("--num-prompts", type=int, default=80)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--ks", default="3,5,7")
    p.add_argument("--xcheck", type=int, default=16, help="spread prompts of the float32 vLLM cross-check (0: none)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    t0 = time.time()
    target = Target.load(device=args.device)
    drafters = {n: load_drafter(d, target).to(target.device).eval()
                for n, d in (s.split("=", 1) for s in args.drafters)}
    ks = [int(k) for k in args.ks.split(",")]
    prompts = [target.chat_ids(t) for t in load_prompts("mt-bench", args.num_prompts)]
    replies = greedy_replies(target, prompts, k=max(ks), max_new_tokens=args.max_new_tokens)
    out = {"command": "python lab/dspark/eval.py " + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": torch.cuda.get_device_name(0) if target.device.type == "cuda" else "cpu",
           "torch": torch.__version__, "dtype": "float32",
           "settings": {"prompts": "mt-bench", "num_prompts": len(prompts), "max_new_tokens": args.max_new_tokens},
           "by_k": {}}
    for k in ks:
        res = evaluate_drafters(target, drafters, prompts, replies, k=k, max_new_tokens=args.max_new_tokens)
        out["by_k"][str(k)] = {n: {key: r[key] for key in ("method", "acceptance_length", "acceptance_per_position",
                                                           "agreement_all_positions", "steps")}
                               for n, r in res.items()}
        print(k, {n: r["acceptance_length"] for n, r in res.items()}, flush=True)
    if args.xcheck:
        xp = [target.chat_ids(t) for t in load_prompts("mt-bench", args.xcheck, spread=True)]
        xr = greedy_replies(target, xp, k=7, max_new_tokens=256)
        res = evaluate_drafters(target, {n: d for n, d in drafters.items() if n.startswith("dspark")}, xp, xr,
                                k=7, max_new_tokens=256)
        out["xcheck_k7_256"] = {n: {key: r[key] for key in ("acceptance_length", "acceptance_per_position", "steps")}
                                for n, r in res.items()}
        out["xcheck_prompts"] = f"mt-bench, {args.xcheck} spread, 256 new tokens, K=7"
    out["seconds"] = round(time.time() - t0, 1)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
