"""Recorded results the notebooks plot, shipped as small package data.

Some figures cannot be measured where a notebook runs (an H200 timing, a replay over all 80
MT-Bench prompts, memory at 8B scale). They were measured once; the raw results live in the
repository's ``benchmarks/results/``, and ``benchmarks/make_recorded.py`` copies the fields the
notebooks plot into ``peagle_lab/recorded/NAME.json``, so a notebook plots them the same way
from a checkout, a ``pip install`` or Colab::

    >>> from peagle_lab import recorded
    >>> "kernel_timings" in recorded.names()
    True
    >>> recorded.load("kernel_timings")["device"]
    'NVIDIA H200'

Every file names its raw ``source`` (with its date, machine and command).
"""
from __future__ import annotations

import json
from importlib import resources


def names() -> list[str]:
    """Names of the recorded results shipped with the package."""
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir() if p.name.endswith(".json"))


def load(name: str) -> dict:
    """The recorded result ``name`` (see :func:`names`) as a dict."""
    path = resources.files(__name__) / f"{name}.json"
    if not path.is_file():
        raise KeyError(f"no recorded result {name!r}; shipped: {', '.join(names())}")
    return json.loads(path.read_text(encoding="utf-8"))
