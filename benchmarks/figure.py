"""What every figure script shares: run `peagle-lab` commands and write one JSON that names the command.

A figure script is a few lines: the `peagle-lab` arguments that made a recorded figure, run here on your own
CPU or GPU. The JSON it writes holds the library's output plus ``command`` (the figure script's own command
line, which reruns it) and ``runs`` (the `peagle-lab` commands it ran).
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path


def own_command() -> str:
    return shlex.join(["python", *sys.argv])


def peagle_lab(argv: list[str]) -> None:
    """Run one `peagle-lab` command in this process; stop with its exit status when it fails."""
    from peagle_lab.cli import main

    print("+ peagle-lab " + shlex.join(argv), file=sys.stderr, flush=True)
    rc = main(argv)
    if rc:
        sys.exit(rc)


def record(argv: list[str], out: str | Path) -> dict:
    """Run ``peagle-lab ARGV --json OUT`` and stamp OUT with the command that reruns this figure."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [*argv, "--json", str(out)]
    peagle_lab(argv)
    data = json.loads(out.read_text())
    data.update(command=own_command(), runs=["peagle-lab " + shlex.join(argv)])
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return data


def args(description: str, default_out: str, **extra):
    """The options every figure script takes: ``--out`` and ``--device``, plus ``extra`` (name -> default)."""
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=default_out, help=f"the JSON to write (default {default_out})")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    for name, default in extra.items():
        ap.add_argument(f"--{name.replace('_', '-')}", default=default, type=type(default))
    return ap.parse_args()
