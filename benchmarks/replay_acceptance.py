"""Why a drafter's AL is lower than its training accuracy suggests: replay greedy decoding offline.

For each drafter, on the same greedy replies (T=0, the first N prompts of a set):

* the engine's own numbers without running it (same settings as ``eval_drafters.py``) (``peagle_lab.train.replay``: AL and acceptance per
  position, step for step what ``generate`` records -- the tests check this);
* agreement per depth against the *real* next token over every reply position ("all"), and over the
  positions where a decoding step actually started ("visited");
* draft-vocabulary coverage of the replies (a token outside it is never accepted).

    python benchmarks/replay_acceptance.py --k 7 --num-prompts 10 --max-new-tokens 128 \
        peagle=peagle_lab/drafters/peagle-smollm2 eagle=peagle_lab/drafters/eagle-smollm2 \
        --json benchmarks/results/replay_acceptance_mtbench.json

A name containing "peagle" drafts in parallel, any other sequentially (EAGLE-3).
"""
from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_drafters import drafter_eval_parser  # noqa: E402

from peagle_lab.drafter import load_drafter  # noqa: E402
from peagle_lab.engine import generate  # noqa: E402
from peagle_lab.prompts import load_prompts  # noqa: E402
from peagle_lab.target import Target  # noqa: E402
from peagle_lab.train.replay import replay_acceptance  # noqa: E402


def main() -> None:
    args = drafter_eval_parser(__doc__).parse_args()
    target = Target.load()
    prompts = [target.chat_ids(p) for p in load_prompts(args.prompts, args.num_prompts)]
    t0 = time.perf_counter()
    replies = [generate(target, p, method="ar", max_new_tokens=args.max_new_tokens + args.k + 1,
                        stop_at_eos=False).tokens for p in prompts]
    gen_s = time.perf_counter() - t0
    results = {}
    for spec in args.drafters:
        name, path = spec.split("=", 1)
        drafter = load_drafter(path, target)
        method = "peagle" if "peagle" in name else "eagle"
        t1 = time.perf_counter()
        total = None
        for p, r in zip(prompts, replies):
            rep = replay_acceptance(target, drafter, p, r, method=method, k=args.k, max_new_tokens=args.max_new_tokens,
                                    eos=tuple(target.eos_token_ids))
            total = rep if total is None else total.merge(rep)
        results[name] = {
            "method": method, "acceptance_length": round(total.stats.acceptance_length, 4),
            "acceptance_per_position": [round(x, 4) for x in total.stats.per_position],
            "steps": total.stats.num_drafts,
            "agreement_all_positions": [round(x, 4) for x in total.agreement_all()],
            "agreement_visited_positions": [round(x, 4) for x in total.agreement_visited()],
            "draft_vocab_coverage": round(total.coverage, 4),
            "replay_seconds": round(time.perf_counter() - t1, 1)}
        print(name, json.dumps(results[name]), flush=True)
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": "this CPU VM (numbers do not depend on the machine)",
           "command": "python benchmarks/replay_acceptance.py " + " ".join(sys.argv[1:]),
           "what": __doc__.split("\n\n")[0].replace("\n", " "),
           "settings": {"k": args.k, "prompts": args.prompts, "num_prompts": args.num_prompts,
                        "max_new_tokens": args.max_new_tokens, "replies_seconds": round(gen_s, 1),
                        "stop_at_eos": True},
           "drafters": dict(spec.split("=", 1) for spec in args.drafters), "results": results}
    Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
