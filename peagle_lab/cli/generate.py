"""``peagle-lab generate``: a reply to one prompt with ar, eagle, peagle or dspark (the teaching engine)."""
from __future__ import annotations

import argparse
import sys

from ..train.config import K_MAX   # the most draft tokens per step a flag accepts
from .common import (DRAFTING, check_drafter_folders, device_name, draft_length, embedded, fraction, non_negative,
                     positive, seed_value, shipped_name)

NAME = "generate"


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("generate", help="generate a reply to one prompt (ar, eagle, peagle or dspark)")
    s.add_argument("prompt")
    s.add_argument("--method", default="ar", choices=["ar", *DRAFTING])
    s.add_argument("--drafter", help="drafter checkpoint folder for eagle / peagle (default with the embedded "
                   "target: the shipped one)")
    s.add_argument("--k", type=draft_length, default=5, help=f"draft tokens per step (1..{K_MAX})")
    s.add_argument("--max-new-tokens", type=positive, default=128)
    s.add_argument("--temperature", type=non_negative, default=0.0, help="0 = greedy")
    s.add_argument("--top-p", type=fraction, default=1.0, help="nucleus sampling mass, in (0, 1] (1 = off)")
    s.add_argument("--seed", type=seed_value, default=0)
    s.add_argument("--target", default=None, help="HF model id or folder (default: embedded SmolLM2-135M-Instruct)")
    s.add_argument("--device", type=device_name, default="auto", help="auto (CUDA when present), cpu or cuda")
    return s


def validate(p: argparse.ArgumentParser, args) -> None:
    from ..prompts import prompt_problem

    if prompt_problem(args.prompt):
        p.error(f"the prompt {prompt_problem(args.prompt)}; give the model some text to answer")
    args.drafter = shipped_name(args.drafter)
    if args.method == "ar" and args.drafter:
        p.error("--drafter is for --method eagle, peagle or dspark (plain decoding drafts nothing): add the method it "
                "drafts for, e.g. --method peagle")
    if args.method != "ar" and not args.drafter and not embedded(args.target):
        p.error(f"--method {args.method} with --target {args.target} needs --drafter FOLDER (a drafter trained for "
                "that target; the shipped ones fit only the embedded SmolLM2-135M-Instruct; or use --method ar)")
    check_drafter_folders(p, [("--drafter", args.drafter)])


def run(args) -> int:
    from ..checkpoint import load_drafter
    from ..engines.teaching import generate
    from ..target import Target

    target = Target.load(args.target, device=args.device)
    path = args.drafter
    if args.method != "ar" and not path:      # the embedded target (check_args): its shipped drafter
        from ..bench import resolve_drafter

        path = resolve_drafter(args.method, None, target_is_default=embedded(args.target))
        print(f"[{args.method}] the shipped drafter {path} (pass --drafter FOLDER for another)", file=sys.stderr)
    drafter = load_drafter(path, target).to(target.device) if path else None
    out = generate(target, target.chat_ids(args.prompt), method=args.method, drafter=drafter, k=args.k,
                   max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    print(target.decode(out.tokens))
    tps = len(out.tokens) / out.seconds if out.seconds else 0.0
    extra = f", AL {out.acceptance.acceptance_length:.2f}" if out.acceptance else ""
    print(f"[{args.method}] {len(out.tokens)} tokens in {out.seconds:.2f} s = {tps:.1f} tok/s{extra}", file=sys.stderr)
    return 0
