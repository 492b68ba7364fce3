"""``peagle-lab``: the command line, one module per command (vLLM's ``entrypoints/cli``). Results go to stdout;
logs and progress bars to stderr.

Each command module holds its parser (``add_parser``), its checks (``validate``: the flags together and the local
folders it reads, before any model loads) and what it runs (``run``); :data:`COMMANDS` lists them, so a new
command is one module and one entry. :func:`check_args` refuses a device this machine cannot honour first (alike
for every command), then runs the command's own checks, then the ones every command shares (prompt file, output
places).
"""
from __future__ import annotations

import argparse
import os
import sys

from . import (bench, check, common, evaluate, export_speculators, generate, info, materialise, regenerate, train,
               vllm_bench)
from .common import Parser
from .evaluate import _drafter_specs  # noqa: F401 -- benchmarks/ablation_eval.py reads drafter specs as eval does
from .train import _train_settings  # noqa: F401 -- the train settings the flags ask for (tests read them)


COMMANDS = {m.NAME: m for m in (info, generate, bench, vllm_bench, regenerate, train, check, materialise, evaluate,
                                export_speculators)}


# Each command's run, under the name main() looks it up by when it runs (so a caller may replace one).
cmd_info, cmd_generate, cmd_bench, cmd_vllm_bench = info.run, generate.run, bench.run, vllm_bench.run
cmd_regenerate, cmd_train, cmd_check, cmd_materialise = regenerate.run, train.run, check.run, materialise.run
cmd_eval, cmd_export_speculators = evaluate.run, export_speculators.run


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="peagle-lab", description="Learn, train and serve P-EAGLE parallel speculative decoding.")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return p


def check_args(parser: argparse.ArgumentParser, args) -> None:
    """Rules that join several flags (argparse types check each flag alone) and the local folders a command
    reads; ``error`` exits 2 with one line naming the command and the flag, before any model loads."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p = subs.choices[args.command]
    common.check_device(p, args)          # first: a device the machine cannot honour is refused alike by all
    validate = getattr(COMMANDS[args.command], "validate", None)
    if validate is not None:
        validate(p, args)
    common.check_prompts(p, args)
    common.check_outputs(p, args)


class Refused(SystemExit):
    """Exit 2 (bad input, as argparse's), with the one line already printed as its text, so a caller catching
    SystemExit still reads why."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def main(argv: list[str] | None = None) -> int:
    """Parse, check the flags together (both exit 2 before any model loads), run the command. A refusal from the
    library (ValueError, FileNotFoundError, a missing asset) or from the command itself (a folder in use, a resume
    or regeneration that does not match) ends in one line and exit 2; PEAGLE_TRACEBACK=1 shows the traceback
    instead."""
    from ..assets import AssetMissing

    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    check_args(parser, args)
    run = globals()["cmd_" + args.command.replace("-", "_")]
    from ..signals import as_interrupt

    try:
        with as_interrupt():                  # SIGTERM and SIGHUP end a command as Ctrl-C does
            return run(args)
    except (ValueError, FileNotFoundError, AssetMissing) as err:
        if os.environ.get("PEAGLE_TRACEBACK"):
            raise
        print(f"peagle-lab {args.command}: {' '.join(str(err).split())}", file=sys.stderr)
        raise SystemExit(2) from None
    except SystemExit as stop:            # a command's own refusal, SystemExit("peagle-lab <cmd>: ..."): exit 2 too
        if not isinstance(stop.code, str):
            raise
        print(" ".join(stop.code.split()), file=sys.stderr)
        raise Refused(stop.code) from None
    except KeyboardInterrupt as stop:
        if os.environ.get("PEAGLE_TRACEBACK"):
            raise
        kept = {"train": "the last checkpoint.pt is kept (a save is atomic); rerun the same command to resume from it",
                "regenerate": "every whole shard is kept; rerun the same command to write only what is missing"}
        print(f"\npeagle-lab {args.command}: interrupted. " + kept.get(args.command, "Nothing was half-written."),
              file=sys.stderr)
        raise SystemExit(128 + getattr(stop, "signum", 2)) from None   # 130 for Ctrl-C, 143 for SIGTERM


__all__ = ["COMMANDS", "Refused", "build_parser", "check_args", "main"]
