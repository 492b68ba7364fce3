"""Replay several drafters at several K on the same greedy replies: the ablation table's raw numbers.

`peagle-lab eval` scores one K per run and regenerates the target's replies each time; on a CPU the
replies are most of the cost (80 MT-Bench prompts: ~10 minutes on two cores). Greedy replies are a
prefix-stable function of the prompt, so the replies made for the largest K, cut to
``max_new_tokens + k + 1`` tokens, are exactly the ones a smaller K needs. One JSON holds every K:

    python benchmarks/ablation_eval.py --ks 3 5 7 --num-prompts 80 \
        peagleR=/path/to/peagleR eagleR=/path/to/eagleR peagle-shipped=peagle-smollm2 eagle-shipped=eagle-smollm2 \
        --json benchmarks/results/ablation_eval_mask_token.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peagle_lab.cli import _drafter_specs  # noqa: E402
from peagle_lab.checkpoint import load_drafter  # noqa: E402
from peagle_lab.train.replay import evaluate_drafters, greedy_replies  # noqa: E402
from peagle_lab.prompts import load_categories, load_prompts  # noqa: E402
from peagle_lab.target import Target  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafters", nargs="+", help="NAME=FOLDER or a shipped name")
    ap.add_argument("--ks", type=int, nargs="+", default=[3, 5, 7])
    ap.add_argument("--prompts", default="mt-bench")
    ap.add_argument("--num-prompts", type=int, default=80)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    specs = _drafter_specs(args.drafters)
    texts = load_prompts(args.prompts, args.num_prompts)
    categories = load_categories(args.prompts, args.num_prompts)
    target = Target.load(device=args.device)
    drafters = {name: load_drafter(folder, target).to(target.device).eval() for name, folder in specs.items()}
    prompts = [target.chat_ids(p) for p in texts]
    t0 = time.perf_counter()
    k_max = max(args.ks)
    replies = greedy_replies(target, prompts, k=k_max, max_new_tokens=args.max_new_tokens, progress=True)
    replies_s = time.perf_counter() - t0
    by_k = {}
    for k in sorted(args.ks):
        cut = [r[: args.max_new_tokens + k + 1] for r in replies]      # the replies greedy_replies(k=k) returns
        by_k[str(k)] = evaluate_drafters(target, drafters, prompts, cut, k=k, max_new_tokens=args.max_new_tokens,
                                         categories=categories)
        for name, r in by_k[str(k)].items():
            print(f"K={k} {name:<16} AL {r['acceptance_length']:.3f}  per position "
                  + " ".join(f"{a:.2f}" for a in r["acceptance_per_position"]), flush=True)
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "command": "python benchmarks/ablation_eval.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": "replayed on a 2-core CPU VM (acceptance does not depend on the machine)",
           "settings": {"ks": sorted(args.ks), "prompts": args.prompts, "num_prompts": len(prompts), "spread": False,
                        "max_new_tokens": args.max_new_tokens, "replies_seconds": round(replies_s, 1),
                        "replies_made_for_k": k_max, "stop_at_eos": True},
           "drafters": specs, "results_by_k": by_k}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
