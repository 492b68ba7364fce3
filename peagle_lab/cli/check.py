"""``peagle-lab check``: validate a drafter against a target and probe its acceptance."""
from __future__ import annotations

import argparse
import json

from .common import device_name, draft_length, shipped_name

NAME = "check"


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("check", help="validate a drafter against a target and probe its acceptance")
    s.add_argument("drafter", help="drafter folder, or a shipped drafter's name (eagle-smollm2, peagle-smollm2)")
    s.add_argument("--target", default=None)
    s.add_argument("--k", type=draft_length, default=None,
                   help="K of the acceptance probe (default: the trained depth of a P-EAGLE drafter, else 3)")
    s.add_argument("--device", type=device_name, default="auto",
                   help="auto (CUDA when present), cpu or cuda: where the probe runs")
    s.add_argument("--json", action="store_true")
    return s


def validate(p: argparse.ArgumentParser, args) -> None:
    from pathlib import Path

    args.drafter = shipped_name(args.drafter)
    if not Path(args.drafter).expanduser().is_dir():
        fault = ("is a file, not a drafter folder" if Path(args.drafter).expanduser().exists() else
                 "no such folder")
        p.error(f"drafter {args.drafter}: {fault}")


def run(args) -> int:
    from ..check import check_drafter, folder_problems
    from ..target import Target

    problems = folder_problems(args.drafter)            # a broken folder is named before any model loads
    report = ({"problems": problems, "warnings": [], "probe": None} if problems
              else check_drafter(args.drafter, Target.load(args.target, device=args.device), k=args.k))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for p in report["problems"]:
            print(f"PROBLEM: {p}")
        for w in report["warnings"]:
            print(f"warning: {w}")
        if report["probe"]:
            pr = report["probe"]
            print(f"probe ({pr['method']}, K={pr['k']}, 2 MT-Bench prompts): AL {pr['acceptance_length']:.2f}, "
                  f"per position {[round(a, 2) for a in pr['acceptance_per_position']]}")
        if not report["problems"]:
            print("ok: the drafter fits this target")
    return 1 if report["problems"] else 0
