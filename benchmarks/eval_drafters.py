"""Validation acceptance of several drafters on the same prompts (teaching engine, T=0).

    python benchmarks/eval_drafters.py --k 7 --num-prompts 10 --max-new-tokens 128 \
        new-peagle=/tmp/new/peagle-smollm2 new-eagle=/tmp/new/eagle-smollm2 \
        shipped-peagle=peagle_lab/drafters/peagle-smollm2 shipped-eagle=peagle_lab/drafters/eagle-smollm2 \
        --json /tmp/eval_k7.json

(benchmarks/results/drafter_eval_mtbench_k7.json holds the runs so far; merge new rows into it.)
Acceptance does not depend on machine load, so this runs fine beside other jobs (one thread).
A name containing "peagle" drafts in parallel, any other sequentially (EAGLE-3).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json

import torch

from peagle_lab.checkpoint import load_drafter
from peagle_lab.engines.teaching import generate
from peagle_lab.prompts import load_prompts
from peagle_lab.stats import AcceptanceStats
from peagle_lab.target import Target


def drafter_eval_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments every drafter-acceptance script here takes (also benchmarks/replay_acceptance.py)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("drafters", nargs="+", help="NAME=FOLDER")
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--prompts", default="mt-bench")
    ap.add_argument("--num-prompts", type=int, default=10)
    ap.add_argument("--spread", action="store_true",
                    help="take --num-prompts evenly spaced over the set (MT-Bench: every category) "
                         "instead of the first")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", required=True)
    return ap


def main() -> None:
    args = drafter_eval_parser(__doc__).parse_args()
    torch.set_num_threads(1)
    target = Target.load()
    prompts = [target.chat_ids(p) for p in load_prompts(args.prompts, args.num_prompts, spread=args.spread)]
    drafters = dict(spec.split("=", 1) for spec in args.drafters)
    loaded = {name: load_drafter(path, target) for name, path in drafters.items()}
    stats = {name: AcceptanceStats(args.k) for name in drafters}
    for i, ids in enumerate(prompts):
        for name, d in loaded.items():
            r = generate(target, ids, method="peagle" if "peagle" in name else "eagle", drafter=d, k=args.k,
                         max_new_tokens=args.max_new_tokens)
            stats[name] = stats[name].merge(r.acceptance)
        print(i, {n: round(s.acceptance_length, 3) for n, s in stats.items()}, flush=True)
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "command": "python benchmarks/eval_drafters.py ...",
           "settings": {"k": args.k, "prompts": args.prompts, "num_prompts": args.num_prompts,
                        "max_new_tokens": args.max_new_tokens},
           "drafters": drafters,
           "results": {n: {"acceptance_length": s.acceptance_length, "per_position": s.per_position}
                       for n, s in stats.items()}}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
