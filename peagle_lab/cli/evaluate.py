"""``peagle-lab eval``: acceptance of drafters on a prompt set at T=0, replayed offline."""
from __future__ import annotations

import argparse
import json
import sys
import time

from .common import add_prompt_args, device_name, draft_length, folder_fault

NAME = "eval"


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("eval", help="acceptance of drafters on a prompt set at T=0, replayed offline "
                                    "(the engine's numbers, faster)")
    s.add_argument("drafters", nargs="+",
                   help="drafter folders, shipped names (peagle-smollm2, eagle-smollm2) or NAME=FOLDER")
    add_prompt_args(s, num_prompts=80, num_help="prompts to score (default 80: all of MT-Bench)")
    s.add_argument("--k", type=draft_length, default=7, help="draft tokens per step")
    s.add_argument("--target", default=None)
    s.add_argument("--device", type=device_name, default="auto", help="auto (CUDA when present), cpu or cuda")
    s.add_argument("--json", default=None, help="also write the results to this file")
    return s


def _drafter_specs(specs: list[str]) -> dict[str, str]:
    """``NAME=FOLDER``, a folder, or a shipped drafter's name -> ``{label: folder}``. A spec that names no
    drafter raises ValueError naming the fix (check_args turns it into exit 2 before any model loads)."""
    from pathlib import Path

    from ..drafters_registry import shipped

    out = {}
    for spec in specs:
        is_folder = (Path(spec) / "config.json").exists()            # a folder whose name holds "=" stays whole
        split = "=" in spec and not is_folder
        name, _, folder = spec.partition("=") if split else ("", "", spec)
        if split and not name.strip():
            raise ValueError(f"drafter {spec!r}: the label before '=' is empty; pass NAME=FOLDER with a name, "
                             "or FOLDER alone")
        if not Path(folder).exists() and folder in shipped():
            folder = str(shipped()[folder])
        if not (Path(folder) / "config.json").exists():
            have = ", ".join(shipped()) or "none"
            raise ValueError(f"drafter {spec!r}: {folder!r} is neither a drafter folder (with config.json) nor a "
                             f"shipped drafter (shipped: {have}); pass FOLDER, a shipped name or NAME=FOLDER")
        label = name or Path(folder).name
        if label in out:
            raise ValueError(f"the label {label!r} names two drafters ({out[label]}, {folder}); "
                             "label them: NAME=FOLDER")
        out[label] = folder
    return out


def validate(p: argparse.ArgumentParser, args) -> None:
    from pathlib import Path

    from ..check import folder_problems

    try:
        specs = _drafter_specs(args.drafters)
    except ValueError as err:
        p.error(str(err))
    for name, folder in specs.items():       # the weights load_drafter reads: all there, and intact?
        fault = folder_fault(folder) or next(iter(folder_problems(Path(folder).expanduser())), None)
        if fault:
            p.error(f"drafter {name}: {fault}")


def run(args) -> int:
    import datetime as dt

    from ..compat import IncompatibleDrafter, check_compatible
    from ..checkpoint import load_drafter
    from ..train.replay import evaluate_drafters, greedy_replies
    from ..prompts import load_categories, load_prompts
    from ..target import Target

    specs = _drafter_specs(args.drafters)
    texts = load_prompts(args.prompts, args.num_prompts, spread=args.spread)   # a bad prompt file fails before loads
    categories = load_categories(args.prompts, args.num_prompts, spread=args.spread)
    target = Target.load(args.target, device=args.device)
    drafters = {name: load_drafter(folder, target).to(target.device).eval() for name, folder in specs.items()}
    for name, d in drafters.items():
        try:
            check_compatible(d, target, args.k)
        except IncompatibleDrafter as err:
            raise SystemExit(f"peagle-lab eval: {name}: {err}") from None
    prompts = [target.chat_ids(p) for p in texts]
    t0 = time.perf_counter()
    replies = greedy_replies(target, prompts, k=args.k, max_new_tokens=args.max_new_tokens, progress=True)
    replies_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    results = evaluate_drafters(target, drafters, prompts, replies, k=args.k, max_new_tokens=args.max_new_tokens,
                                categories=categories)
    print(f"{len(prompts)} {args.prompts} prompts ({'spread' if args.spread else 'first'}), "
          f"{args.max_new_tokens} new tokens, K={args.k}, T=0; greedy replies {replies_s:.0f} s, "
          f"replay {time.perf_counter() - t1:.0f} s", file=sys.stderr)
    width, pw = max(len(n) for n in results) + 2, max(5 * args.k - 1, len("acceptance per position"))
    print(f"{'drafter':<{width}}{'method':<8}{'AL':>6}  {'acceptance per position':<{pw}}  "
          "second draft right  coverage")
    for name, r in results.items():
        pos = " ".join(f"{a:.2f}" for a in r["acceptance_per_position"])
        second = r["agreement_all_positions"][1] if args.k > 1 else float("nan")
        print(f"{name:<{width}}{r['method']:<8}{r['acceptance_length']:>6.2f}  {pos:<{pw}}  {second:>18.2f}  "
              f"{r['draft_vocab_coverage']:>8.1%}")
    for name, r in results.items():
        if "acceptance_length_by_category" in r:
            cats = ", ".join(f"{c} {al:.2f}" for c, al in r["acceptance_length_by_category"].items())
            print(f"{name} by category: {cats}")
    if args.json:
        from ..atomic import atomic_file

        with atomic_file(args.json) as tmp:
            tmp.chmod(0o644)
            tmp.write_text(json.dumps({
                "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "command": "peagle-lab " + " ".join(args.argv),
                "settings": {"k": args.k, "prompts": args.prompts, "num_prompts": len(prompts), "spread": args.spread,
                             "max_new_tokens": args.max_new_tokens, "replies_seconds": round(replies_s, 1),
                             "stop_at_eos": True},
                "drafters": specs, "results": results}, indent=1))
    return 0
