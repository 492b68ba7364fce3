"""``peagle-lab bench``: tokens/s and acceptance of ar / hf / eagle / peagle on one target.

Fairness rules (DESIGN.md): the first N prompts in file order, one chat template, one token
budget; one warm-up generation per configuration; configurations interleaved per prompt so
machine noise hits all alike; tokens/s = generated tokens / wall time including prefill.
"""
from __future__ import annotations

import datetime as _dt
import json
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from .drafter import load_drafter
from .drafters_registry import shipped
from .engine import generate
from .prompts import load_prompts
from .stats import AcceptanceStats
from .target import Target

BENCH_METHODS = ("ar", "hf", "eagle", "peagle")
DEFAULT_DRAFTERS = {"eagle": "eagle-smollm2", "peagle": "peagle-smollm2"}


@dataclass
class _Row:
    method: str
    k: int | None
    tokens: int = 0
    seconds: float = 0.0
    stats: AcceptanceStats | None = None
    identical: bool | None = None
    times: dict = field(default_factory=lambda: {"prefill": 0.0, "draft": 0.0, "verify": 0.0, "bookkeeping": 0.0})


def resolve_drafter(method: str, path: str | None, target_is_default: bool) -> str:
    if path:
        return path
    name = DEFAULT_DRAFTERS[method]
    if target_is_default and name in shipped():
        return str(shipped()[name])
    flag = "--eagle-drafter" if method == "eagle" else "--peagle-drafter"
    raise SystemExit(f"method {method!r} needs a drafter: no shipped drafter {name!r} for this target; pass {flag} DIR")


def run_bench(*, methods, ks, prompts: str, num_prompts: int, max_new_tokens: int, temperature: float = 0.0,
              target: Target | None = None, target_name: str | None = None, eagle_drafter: str | None = None,
              peagle_drafter: str | None = None, seed: int = 0, progress: bool = True) -> dict:
    """Run the benchmark and return the JSON-ready result (``{"results": [...], ...}``)."""
    bad = [m for m in methods if m not in BENCH_METHODS]
    if bad:
        raise SystemExit(f"unknown method(s) {bad}; choose from {', '.join(BENCH_METHODS)}")
    target = target or Target.load(target_name)
    drafters = {}
    for m, path in (("eagle", eagle_drafter), ("peagle", peagle_drafter)):
        if m in methods:
            drafters[m] = load_drafter(resolve_drafter(m, path, target_name in (None, "smollm2")), target)
    rows = []
    for m in methods:
        for k in (ks if m in drafters else [None]):
            rows.append(_Row(m, k, stats=AcceptanceStats(k) if k else None))
    prompt_ids = [target.chat_ids(p) for p in load_prompts(prompts, num_prompts)]
    if not prompt_ids:
        raise SystemExit(f"no prompts in {prompts}")

    def run(row: _Row, ids: list[int], s: int):
        if row.method == "hf":
            return target.hf_generate(ids, max_new_tokens, temperature=temperature, seed=s)
        return generate(target, ids, method=row.method, drafter=drafters.get(row.method), k=row.k or 1,
                        max_new_tokens=max_new_tokens, temperature=temperature, seed=s)

    for row in rows:  # warm-up: one generation per configuration, discarded
        run(row, prompt_ids[0][:64], seed)
    greedy = temperature <= 0
    for i, ids in enumerate(tqdm(prompt_ids, desc="bench prompts", disable=not progress, file=sys.stderr)):
        reference = None
        if greedy:
            ar_row = next((r for r in rows if r.method == "ar"), None)
            if ar_row is None:  # still need AR output for identical_to_ar, untimed
                reference = generate(target, ids, method="ar", max_new_tokens=max_new_tokens).tokens
        for row in rows:
            out = run(row, ids, seed + i)
            row.tokens += len(out.tokens)
            row.seconds += out.seconds
            if row.method == "ar":
                reference = out.tokens if greedy else reference
            elif greedy:
                same = out.tokens == reference
                row.identical = same if row.identical is None else (row.identical and same)
            if getattr(out, "acceptance", None) is not None:
                row.stats = row.stats.merge(out.acceptance)
                for key, value in out.times.to_dict().items():
                    row.times[key] += value
    results = []
    for row in rows:
        results.append({
            "method": row.method, "k": row.k,
            "tokens_per_s": row.tokens / row.seconds if row.seconds else 0.0,
            "acceptance_length": row.stats.acceptance_length if row.stats else None,
            "acceptance_per_position": row.stats.per_position if row.stats else None,
            "conditional_acceptance": row.stats.conditional if row.stats else None,
            "identical_to_ar": row.identical if row.method not in ("ar",) else None,
            "num_prompts": len(prompt_ids), "new_tokens": row.tokens, "seconds": row.seconds,
            "time_split_s": row.times if row.stats else None,
        })
    return {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} {platform.machine()}", "target": target.name,
            "settings": {"prompts": str(prompts), "num_prompts": num_prompts, "max_new_tokens": max_new_tokens,
                         "temperature": temperature, "methods": list(methods), "k": list(ks)},
            "results": results}


def write_json(result: dict, path: str | None) -> None:
    text = json.dumps(result, indent=2)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text + "\n")
    print(text)
