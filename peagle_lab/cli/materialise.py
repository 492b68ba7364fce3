"""``peagle-lab materialise``: the folder vLLM loads for a drafter."""
from __future__ import annotations

import argparse

from .common import check_drafter_folders, shipped_name

NAME = "materialise"


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("materialise", help="print the folder vLLM loads for a drafter (one storing a learned mask row "
                                           "is written once into the cache as the target's embedding with that row)")
    s.add_argument("drafter", help="drafter folder, or a shipped drafter's name (eagle-smollm2, peagle-smollm2)")
    s.add_argument("--target", default=None, help="the target's HF folder (default: the embedded SmolLM2, converted)")
    return s


def validate(p: argparse.ArgumentParser, args) -> None:
    args.drafter = shipped_name(args.drafter)
    check_drafter_folders(p, [("drafter", args.drafter)])


def run(args) -> int:
    from ..assets import resolve_target
    from ..materialise import materialise_for_vllm

    print(materialise_for_vllm(args.drafter, resolve_target(args.target)))
    return 0
