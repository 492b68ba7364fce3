"""What every command module of :mod:`peagle_lab.cli` shares: argparse value types, the flags several commands
take, the one-line parser, and the checks of folders and outputs a command names before any model loads."""
from __future__ import annotations

import argparse
import math
import os

from ..train.config import K_MAX   # the most draft tokens per step a flag accepts (the shipped drafters train depth 8)

# The drafting methods the commands offer, in one place (the engines' own table: peagle_lab.engines.request.METHODS;
# not imported here, so parsing flags loads no model code).
DRAFTING = ("eagle", "peagle", "dspark")


def _bounds(lo, hi, lo_open: bool = False, hi_open: bool = False) -> str:
    """The allowed range in words: ">= 1", "> 0", "in (0, 1]"."""
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo}"
    return f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"


def _inside(value, lo, hi, lo_open: bool, hi_open: bool) -> bool:
    if lo is not None and (value < lo or (lo_open and value == lo)):
        return False
    return hi is None or (value < hi or (not hi_open and value == hi))


def int_range(lo: int | None = None, hi: int | None = None):
    """An argparse ``type``: a whole number in [lo, hi] (either end may be open-ended with None)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not _inside(value, lo, hi, False, False):
            raise argparse.ArgumentTypeError(f"expected a whole number {_bounds(lo, hi)}, got {text!r}")
        return value
    parse.__name__ = "whole number"
    return parse


def float_range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False):
    """An argparse ``type``: a finite number within [lo, hi], either end open (``lo_open``/``hi_open``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not _inside(value, lo, hi, lo_open, hi_open):
            raise argparse.ArgumentTypeError(f"expected a number {_bounds(lo, hi, lo_open, hi_open)}, got {text!r}")
        return value
    parse.__name__ = "number"
    return parse


def int_list(lo: int = 1, hi: int | None = None):
    """An argparse ``type``: comma-separated whole numbers, each in [lo, hi], at least one."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            values = []
        if not values or not all(_inside(v, lo, hi, False, False) for v in values):
            raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers {_bounds(lo, hi)} "
                                             f"like 3,5,7, got {text!r}")
        return values
    parse.__name__ = "list of whole numbers"
    return parse


ints = int_list(1)                          # draft lengths, batch sizes, concurrencies: each >= 1
draft_lengths = int_list(1, K_MAX)
positive = int_range(1)
count = int_range(0)                        # a count that may be zero
seed_value = int_range(0, 2**63 - 1)              # what torch's generators take
draft_length = int_range(1, K_MAX)
fraction = float_range(0, 1, lo_open=True)  # (0, 1]: top-p, a share of memory
non_negative = float_range(0)
above_zero = float_range(0, lo_open=True)


def method_drafter(text: str) -> tuple[str, str]:
    """An argparse ``type`` for ``--drafter METHOD=DIR``: the drafter a method drafts with (a folder; vllm-bench also
    takes a Hugging Face id)."""
    method, eq, where = text.partition("=")
    if not eq or method not in DRAFTING or not where:
        raise argparse.ArgumentTypeError(f"expected METHOD=DIR with METHOD eagle, peagle or dspark, like "
                                         f"peagle=runs/peagle, got {text!r}")
    return method, where


def add_drafter_arg(s: argparse.ArgumentParser, where: str = "a folder") -> None:
    s.add_argument("--drafter", type=method_drafter, action="append", default=[], metavar="METHOD=DIR",
                   help=f"the drafter of eagle, peagle or dspark, {where}, e.g. peagle=runs/peagle-drafter; "
                        "repeatable, one per method (default: the shipped drafters with the embedded target)")


def method_list(text: str) -> list[str]:
    """Comma-separated methods, each once, at least one (argparse ``type``)."""
    methods = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not methods:
        raise argparse.ArgumentTypeError(f"expected comma-separated methods like ar,eagle,peagle, got {text!r}")
    return methods


def device_name(text: str) -> str:
    """An argparse ``type`` for ``--device``: auto, cpu, cuda or cuda:N."""
    value = text.strip().lower()
    if value in ("auto", "cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit()):
        return value
    raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}")


def embedded(target: str | None) -> bool:
    """Whether ``--target`` names the embedded SmolLM2-135M-Instruct (left out, or by its name)."""
    from ..assets import DEFAULT_TARGET

    return target is None or str(target).lower() in (DEFAULT_TARGET, "smollm2-135m-instruct")


def add_prompt_args(s: argparse.ArgumentParser, num_prompts: int = 10, num_help: str | None = None) -> None:
    """The prompt-set flags bench, vllm-bench and eval share: --prompts, --num-prompts, --spread, --max-new-tokens."""
    s.add_argument("--prompts", default="mt-bench", help="mt-bench, humaneval, sharegpt or a .jsonl file")
    s.add_argument("--num-prompts", type=positive, default=num_prompts, help=num_help)
    s.add_argument("--spread", action="store_true",
                   help="take --num-prompts evenly spaced over the set instead of the first (MT-Bench is sorted by "
                        "category; its first 10 are all writing)")
    s.add_argument("--max-new-tokens", type=positive, default=128)


class Parser(argparse.ArgumentParser):
    """argparse with its complaint on one line: the command, the flag and what the flag accepts (exit 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def folder_fault(value: str, what: str = "drafter") -> str | None:
    """Why ``value`` is not a local model folder (with config.json), or None when it is one."""
    from pathlib import Path

    path = Path(value).expanduser()
    if not path.exists():
        from ..drafters_registry import shipped

        return f"{value}: no such folder (nor a shipped drafter: {', '.join(sorted(shipped()))})"
    if not (path / "config.json").is_file():
        return f"{value} has no config.json: not a {what} folder"
    return None


def holds(outer: str, inner: str) -> bool:
    """True when folder ``inner`` is ``outer`` or lies inside it: replacing ``outer`` would take ``inner`` along."""
    from pathlib import Path

    a, b = Path(outer).expanduser().resolve(), Path(inner).expanduser().resolve()
    return a == b or a in b.parents


def shipped_name(value):
    """A shipped drafter's name stands for its folder (a folder of that name in the working directory comes first)."""
    from pathlib import Path

    from ..drafters_registry import shipped

    if isinstance(value, str) and value in shipped() and not Path(value).expanduser().exists():
        return str(shipped()[value])
    return value


def check_drafter_folders(p: argparse.ArgumentParser, flags: list[tuple[str, str | None]]) -> None:
    """Local drafter folders a command reads exist, with intact weights, before any model loads (exit 2, the flag
    named)."""
    from pathlib import Path

    for flag, value in flags:
        fault = value and folder_fault(value)
        if value and not fault:                                        # weights load_drafter reads: intact?
            from ..check import folder_problems

            fault = next(iter(folder_problems(Path(value).expanduser())), None)
        if fault:
            p.error(f"{flag}{'' if flag.endswith('=') else ' '}{fault}")


def check_one_drafter_per_method(p: argparse.ArgumentParser, args) -> None:
    methods = [m for m, _ in args.drafter]
    for method in {m for m in methods if methods.count(m) > 1}:
        p.error(f"--drafter {method}=... is given twice; one drafter per method")


def check_not_read(p: argparse.ArgumentParser, args, read: list[tuple[str, str | None]], out_flag: str,
                   out: str | None) -> None:
    """An export never replaces what its own command reads or keeps (``read``: what, folder), even one peagle-lab
    wrote, unless --overwrite says so."""
    from pathlib import Path

    for what, folder in read:
        exists = Path(folder).expanduser().exists() if folder else False      # a hub id (--target) is no folder
        if out and folder and not getattr(args, "overwrite", False) and (exists or what.startswith("the run")) \
                and holds(out, folder):
            p.error(f"{out_flag} {out} is (or holds) {what} {folder}, which this command reads: writing there would "
                    "delete it. Choose a new or empty folder, or pass --overwrite to replace it")


def check_device(p: argparse.ArgumentParser, args) -> None:
    """Every command refuses a device this machine cannot honour, alike and at once (a dry run prints a GPU's plan)."""
    device = getattr(args, "device", None)
    if device and device.startswith("cuda") and not getattr(args, "dry_run", False):
        from ..device import device_problem

        problem = device_problem(device)
        if problem:
            p.error(problem)


def check_prompts(p: argparse.ArgumentParser, args) -> None:
    if getattr(args, "prompts", None):
        from ..prompts import _set_path

        name, path = _set_path(args.prompts)
        if name is None and not path.expanduser().is_file():
            p.error(f"--prompts {args.prompts}: neither mt-bench, humaneval, sharegpt nor an existing .jsonl file")


def check_outputs(p: argparse.ArgumentParser, args) -> None:
    """Outputs are writable places: folders that are not files, files that are not folders (exit 2)."""
    from pathlib import Path

    folders = [("--out", getattr(args, "out", None)), ("--export", getattr(args, "export", None)),
               ("--logs", getattr(args, "logs", None))]
    files = [("--json", args.json if isinstance(getattr(args, "json", None), str) else None)]
    for flag, value in folders + files:
        if not value:
            continue
        path = Path(value).expanduser()
        if (flag, value) in folders and path.exists() and not path.is_dir():
            p.error(f"{flag} {value} is a file; give a folder (new, empty, or one peagle-lab wrote)")
        if (flag, value) in files and path.is_dir():
            p.error(f"{flag} {value} is a folder; give a file name, like {Path(value) / 'result.json'}")
        parent = next((a for a in path.absolute().parents if a.exists()), None)
        if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK):
            p.error(f"{flag} {value}: {parent or path} is not a folder this user can write in")
