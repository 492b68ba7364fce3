"""``peagle-lab bench``: tokens/s and acceptance of ar / hf / eagle / peagle on one target.

Fairness rules (DESIGN.md): the first N prompts in file order, one chat template, one token
budget; one warm-up generation per configuration; configurations interleaved per prompt (per
round of prompts when batching) so machine noise hits all alike; tokens/s = generated tokens /
wall time including prefill. ``--batch-size B`` runs B requests at once through the batched
engine; tokens/s then counts all of them over the batch's wall time.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from .drafter import load_drafter
from .drafters_registry import shipped
from .batch_engine import generate_batch
from .engine import StepTimes, generate
from .prompts import load_prompts
from .stats import AcceptanceStats
from .target import Target

BENCH_METHODS = ("ar", "hf", "eagle", "peagle")
DEFAULT_DRAFTERS = {"eagle": "eagle-smollm2", "peagle": "peagle-smollm2"}


@dataclass
class _Row:
    method: str
    k: int | None
    batch_size: int = 1
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


def _groups(n: int, size: int) -> list[list[int]]:
    return [list(range(i, min(i + size, n))) for i in range(0, n, size)]


def run_bench(*, methods, ks, prompts: str, num_prompts: int, max_new_tokens: int, temperature: float = 0.0,
              target: Target | None = None, target_name: str | None = None, eagle_drafter: str | None = None,
              peagle_drafter: str | None = None, seed: int = 0, progress: bool = True,
              batch_sizes=(1,), spread: bool = False) -> dict:
    """Run the benchmark and return the JSON-ready result (``{"results": [...], ...}``).

    ``batch_sizes``: for each B, rows run consecutive groups of B prompts as one batch
    (:func:`peagle_lab.batch_engine.generate_batch`; B = 1 is the single-request engine), and
    tokens/s counts every request's tokens over the batch's wall time. Prompts are visited in
    rounds of ``lcm(batch_sizes)`` so every configuration sees the same prompts at about the same
    time. With B > 1, identical_to_ar compares each request with single-request AR (for the batched
    ``ar`` row too).
    """
    bad = [m for m in methods if m not in BENCH_METHODS]
    if bad:
        raise SystemExit(f"unknown method(s) {bad}; choose from {', '.join(BENCH_METHODS)}")
    batch_sizes = sorted(set(int(b) for b in batch_sizes))
    if not batch_sizes or batch_sizes[0] < 1:
        raise SystemExit(f"--batch-size must be integers >= 1, got {batch_sizes}")
    if batch_sizes[-1] > 1 and temperature > 0:
        raise SystemExit("batched decoding is greedy only: use --temperature 0 with --batch-size > 1, or --batch-size 1 for sampling")
    if batch_sizes[-1] > 1 and "hf" in methods:
        raise SystemExit("the hf baseline runs one prompt at a time: drop hf from --methods or use --batch-size 1")
    target = target or Target.load(target_name)
    drafters = {}
    for m, path in (("eagle", eagle_drafter), ("peagle", peagle_drafter)):
        if m in methods:
            drafters[m] = load_drafter(resolve_drafter(m, path, target_name in (None, "smollm2")), target)
    rows = []
    for b in batch_sizes:
        for m in methods:
            for k in (ks if m in drafters else [None]):
                rows.append(_Row(m, k, b, stats=AcceptanceStats(k) if k else None))
    prompt_ids = [target.chat_ids(p) for p in load_prompts(prompts, num_prompts, spread=spread)]
    if not prompt_ids:
        raise SystemExit(f"no prompts in {prompts}")

    def run(row: _Row, batch: list[list[int]], s: int, budget: int = max_new_tokens):
        """-> (token lists, wall seconds, acceptance per request, time split)"""
        if row.batch_size > 1:
            out = generate_batch(target, batch, method=row.method, drafter=drafters.get(row.method), k=row.k or 1,
                                 max_new_tokens=budget)
            return [r.tokens for r in out.results], out.seconds, [r.acceptance for r in out.results], out.times
        outs = []
        for ids in batch:
            if row.method == "hf":
                outs.append(target.hf_generate(ids, budget, temperature=temperature, seed=s))
            else:
                outs.append(generate(target, ids, method=row.method, drafter=drafters.get(row.method), k=row.k or 1,
                                     max_new_tokens=budget, temperature=temperature, seed=s))
        split = None
        if outs and getattr(outs[0], "acceptance", None) is not None:
            split = StepTimes(**{key: sum(getattr(o.times, key) for o in outs) for key in StepTimes().to_dict()})
        return ([o.tokens for o in outs], sum(o.seconds for o in outs),
                [getattr(o, "acceptance", None) for o in outs], split)

    warm = [ids[:64] for ids in prompt_ids[: batch_sizes[-1]]]
    for row in rows:  # warm-up: one short generation (or batch) per configuration, discarded
        run(row, warm[: row.batch_size], seed, budget=min(max_new_tokens, 16))
    greedy = temperature <= 0
    single_ar = next((r for r in rows if r.method == "ar" and r.batch_size == 1), None)
    round_size = math.lcm(*batch_sizes)
    for group in tqdm(_groups(len(prompt_ids), round_size), desc="bench rounds", disable=not progress, file=sys.stderr):
        reference = {}
        if greedy:
            if single_ar is not None:          # timed, and it is the reference
                toks, secs, _, _ = run(single_ar, [prompt_ids[i] for i in group], seed + group[0])
                single_ar.tokens += sum(len(t) for t in toks)
                single_ar.seconds += secs
                reference = dict(zip(group, toks))
            else:                              # still need AR output for identical_to_ar, untimed
                reference = {i: generate(target, prompt_ids[i], method="ar", max_new_tokens=max_new_tokens).tokens
                             for i in group}
        for row in rows:
            if row is single_ar and greedy:
                continue
            for chunk in _groups(len(group), row.batch_size):
                idx = [group[j] for j in chunk]
                toks, secs, accs, split = run(row, [prompt_ids[i] for i in idx], seed + idx[0])
                row.tokens += sum(len(t) for t in toks)
                row.seconds += secs
                if greedy and (row.method != "ar" or row.batch_size > 1):
                    same = all(t == reference[i] for t, i in zip(toks, idx))
                    row.identical = same if row.identical is None else (row.identical and same)
                for acc in accs:
                    if acc is not None:
                        row.stats = row.stats.merge(acc)
                if split is not None:
                    for key, value in split.to_dict().items():
                        row.times[key] += value
    results = []
    for row in rows:
        results.append({
            "method": row.method, "k": row.k, "batch_size": row.batch_size,
            "tokens_per_s": row.tokens / row.seconds if row.seconds else 0.0,
            "acceptance_length": row.stats.acceptance_length if row.stats else None,
            "acceptance_per_position": row.stats.per_position if row.stats else None,
            "conditional_acceptance": row.stats.conditional if row.stats else None,
            "identical_to_ar": row.identical,
            "num_prompts": len(prompt_ids), "new_tokens": row.tokens, "seconds": row.seconds,
            "time_split_s": row.times if row.stats else None,
        })
    return {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} {platform.machine()}", "target": target.name,
            "settings": {"prompts": str(prompts), "num_prompts": num_prompts, "spread": spread, "max_new_tokens": max_new_tokens,
                         "temperature": temperature, "methods": list(methods), "k": list(ks),
                         "batch_size": batch_sizes},
            "results": results}


def write_json(result: dict, path: str | None) -> None:
    text = json.dumps(result, indent=2)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text + "\n")
    print(text)
