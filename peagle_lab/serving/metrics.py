"""vLLM's speculative-decoding counters from ``/metrics`` (Prometheus text format).

Counters used (``_total`` suffix in the text format): ``vllm:spec_decode_num_drafts``,
``vllm:spec_decode_num_draft_tokens``, ``vllm:spec_decode_num_accepted_tokens`` and
``vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}``. Diff two snapshots taken around
a run, then :func:`acceptance_from_diff` gives AL = 1 + accepted / drafts and per-position rates.
"""
from __future__ import annotations

import re

from ..stats import AcceptanceStats

_LINE = re.compile(r'^(vllm:spec_decode_[a-z_]+?)(?:_total)?(\{[^}]*\})?\s+([0-9.eE+-]+)$')


def parse_spec_decode(text: str) -> dict[str, float]:
    """``{"num_drafts": .., "num_draft_tokens": .., "num_accepted_tokens": .., "accepted_per_pos[i]": ..}``
    summed over engines/models; ``_created`` timestamps and other metrics are ignored."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m or m.group(1).endswith("_created"):
            continue
        name = m.group(1).removeprefix("vllm:spec_decode_")
        labels = m.group(2) or ""
        pos = re.search(r'position="(\d+)"', labels)
        key = "accepted_per_pos[%s]" % pos.group(1) if pos else name
        out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def acceptance_from_diff(d: dict[str, float], k: int) -> AcceptanceStats:
    """AcceptanceStats (vLLM definitions) from a counter diff of a run with K draft tokens."""
    drafts = int(d.get("num_drafts", 0))
    return AcceptanceStats(k=k, num_drafts=drafts, num_draft_tokens=int(d.get("num_draft_tokens", 0)),
                           num_accepted_tokens=int(d.get("num_accepted_tokens", 0)),
                           accepted_per_pos=[int(d.get(f"accepted_per_pos[{i}]", 0)) for i in range(k)])
