"""``peagle-lab export-speculators``: a drafter in the speculators format (vLLM >= 0.33 reads it)."""
from __future__ import annotations

import argparse
import json

from .common import check_drafter_folders, check_not_read, draft_length, shipped_name

NAME = "export-speculators"


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("export-speculators", help="write a drafter in the speculators format (vLLM >= 0.33 reads it)")
    s.add_argument("drafter", help="drafter folder in vLLM's EAGLE-3 layout, or a shipped drafter's name")
    s.add_argument("out", help="new folder for the speculators-format copy (or an empty one, or an earlier export)")
    s.add_argument("--overwrite", action="store_true",
                   help="let OUT replace a folder peagle-lab did not write (its files are deleted)")
    s.add_argument("--verifier", default=None, help="target name recorded in the config (default: the target's)")
    s.add_argument("--k", type=draft_length, default=None, help="speculative tokens (default: trained depth, else 3)")
    s.add_argument("--target", default=None)
    return s


def validate(p: argparse.ArgumentParser, args) -> None:
    args.drafter = shipped_name(args.drafter)
    check_drafter_folders(p, [("drafter", args.drafter)])
    check_not_read(p, args, [("the drafter folder", args.drafter), ("--target", args.target)], "out", args.out)


def run(args) -> int:
    from ..checkpoint import export_speculators, load_drafter
    from ..compat import check_compatible
    from ..target import Target

    from ..atomic import DestinationInUse, check_replaceable
    from ..checkpoint import DRAFTER_NOTE

    try:
        check_replaceable(args.out, args.overwrite, note=DRAFTER_NOTE)   # before loading: a user's folder stays
        target = Target.load(args.target)
        drafter = load_drafter(args.drafter, target)
        check_compatible(drafter, target, args.k)   # vLLM would too
        arch = list(getattr(target.config, "architectures", None) or [type(target.model).__name__])
        path = export_speculators(drafter, args.out, verifier_name=args.verifier or target.name,
                                  verifier_architectures=arch, k=args.k, overwrite=args.overwrite, flag="--overwrite")
    except DestinationInUse as err:
        raise SystemExit(f"peagle-lab export-speculators: {err}") from None
    print(json.dumps({"speculators_export": str(path)}))
    return 0
