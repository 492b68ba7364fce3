"""Why a drafter's AL is lower than its training accuracy suggests: replay greedy decoding offline.

For each drafter, on the same greedy replies (T=0, the first N prompts of a set, or N spread over it):

* the engine's own numbers without running it (same settings as ``eval_drafters.py``)
  (``peagle_lab.train.replay``: AL and acceptance per position, step for step what ``generate`` records --
  the tests check this);
* agreement per depth against the *real* next token over every reply position ("all"), and over the
  positions where a decoding step actually started ("visited");
* draft-vocabulary coverage of the replies (a token outside it is never accepted);
* AL per category where prompts carry one (MT-Bench: ten prompts each, in file order; the first ten are
  all "writing", the hardest text to draft, so ``--num-prompts 10`` alone reads low).

    python benchmarks/replay_acceptance.py --k 7 --num-prompts 80 --max-new-tokens 128 \
        peagle=peagle_lab/drafters/peagle-smollm2 eagle=peagle_lab/drafters/eagle-smollm2 \
        --json benchmarks/results/replay_acceptance_mtbench80.json

Each drafter drafts as its checkpoint says (parallel with a mask token, else sequentially); the
library's ``peagle-lab eval`` prints the same numbers (``peagle_lab.train.replay.evaluate_drafters``).
"""
from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_drafters import drafter_eval_parser  # noqa: E402

from peagle_lab.checkpoint import load_drafter  # noqa: E402
from peagle_lab.prompts import load_categories, load_prompts  # noqa: E402
from peagle_lab.target import Target  # noqa: E402
from peagle_lab.train.replay import evaluate_drafters, greedy_replies  # noqa: E402


def main() -> None:
    args = drafter_eval_parser(__doc__).parse_args()
    target = Target.load()
    prompts = [target.chat_ids(p) for p in load_prompts(args.prompts, args.num_prompts, spread=args.spread)]
    t0 = time.perf_counter()
    replies = greedy_replies(target, prompts, k=args.k, max_new_tokens=args.max_new_tokens)
    gen_s = time.perf_counter() - t0
    specs = dict(spec.split("=", 1) for spec in args.drafters)
    if len(specs) != len(args.drafters):
        raise SystemExit("two drafters share a NAME; give each its own NAME=FOLDER")
    t1 = time.perf_counter()
    results = evaluate_drafters(target, {name: load_drafter(path, target) for name, path in specs.items()}, prompts,
                                replies, k=args.k, max_new_tokens=args.max_new_tokens,
                                categories=load_categories(args.prompts, args.num_prompts, spread=args.spread))
    for name, row in results.items():
        print(name, json.dumps(row), flush=True)
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": "this CPU VM (numbers do not depend on the machine)",
           "command": "python benchmarks/replay_acceptance.py " + " ".join(sys.argv[1:]),
           "what": __doc__.split("\n\n")[0].replace("\n", " "),
           "settings": {"k": args.k, "prompts": args.prompts, "num_prompts": args.num_prompts, "spread": args.spread,
                        "max_new_tokens": args.max_new_tokens, "replies_seconds": round(gen_s, 1),
                        "replay_seconds": round(time.perf_counter() - t1, 1), "stop_at_eos": True},
           "drafters": specs, "results": results}
    Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
