"""Why a drafter's AL is lower than its training accuracy suggests: replay greedy decoding offline.

For each drafter, on the same greedy replies (T=0, the first N prompts of a set, or N spread over it):

* the engine's own numbers without running it (same settings as ``eval_drafters.py``) (``peagle_lab.train.replay``: AL and acceptance per
  position, step for step what ``generate`` records -- the tests check this);
* agreement per depth against the *real* next token over every reply position ("all"), and over the
  positions where a decoding step actually started ("visited");
* draft-vocabulary coverage of the replies (a token outside it is never accepted);
* with all 80 MT-Bench prompts, AL per category (ten prompts each, in file order: the first ten are
  all "writing", the hardest text to draft, so ``--num-prompts 10`` alone reads low).

    python benchmarks/replay_acceptance.py --k 7 --num-prompts 80 --max-new-tokens 128 \
        peagle=peagle_lab/drafters/peagle-smollm2 eagle=peagle_lab/drafters/eagle-smollm2 \
        --json benchmarks/results/replay_acceptance_mtbench80.json

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


MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


def al_by_category(per_prompt: list[list[int]]) -> dict[str, float]:
    """AL per MT-Bench category from ``[drafts, accepted]`` per prompt of all 80 (ten per category, in order)."""
    out = {}
    for i, name in enumerate(MT_BENCH_CATEGORIES):
        rows = per_prompt[10 * i: 10 * i + 10]
        out[name] = round(1 + sum(a for _, a in rows) / max(1, sum(d for d, _ in rows)), 3)
    return out


def main() -> None:
    args = drafter_eval_parser(__doc__).parse_args()
    target = Target.load()
    prompts = [target.chat_ids(p) for p in load_prompts(args.prompts, args.num_prompts, spread=args.spread)]
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
        total, per_prompt = None, []
        for p, r in zip(prompts, replies):
            rep = replay_acceptance(target, drafter, p, r, method=method, k=args.k, max_new_tokens=args.max_new_tokens,
                                    eos=tuple(target.eos_token_ids))
            per_prompt.append([rep.stats.num_drafts, rep.stats.num_accepted_tokens])
            total = rep if total is None else total.merge(rep)
        results[name] = {
            "method": method, "acceptance_length": round(total.stats.acceptance_length, 4),
            "acceptance_per_position": [round(x, 4) for x in total.stats.per_position],
            "steps": total.stats.num_drafts,
            "agreement_all_positions": [round(x, 4) for x in total.agreement_all()],
            "agreement_visited_positions": [round(x, 4) for x in total.agreement_visited()],
            "draft_vocab_coverage": round(total.coverage, 4),
            "drafts_accepted_per_prompt": per_prompt,
            "replay_seconds": round(time.perf_counter() - t1, 1)}
        if args.prompts == "mt-bench" and len(prompts) == 80:
            results[name]["acceptance_length_by_category"] = al_by_category(per_prompt)
        print(name, json.dumps(results[name]), flush=True)
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": "this CPU VM (numbers do not depend on the machine)",
           "command": "python benchmarks/replay_acceptance.py " + " ".join(sys.argv[1:]),
           "what": __doc__.split("\n\n")[0].replace("\n", " "),
           "settings": {"k": args.k, "prompts": args.prompts, "num_prompts": args.num_prompts, "spread": args.spread,
                        "max_new_tokens": args.max_new_tokens, "replies_seconds": round(gen_s, 1),
                        "stop_at_eos": True},
           "drafters": dict(spec.split("=", 1) for spec in args.drafters), "results": results}
    Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
