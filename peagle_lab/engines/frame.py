"""What every engine shares: the result types, the request check, the accept rule, the step timer.

The three engines (:mod:`~peagle_lab.engines.teaching`, :mod:`~peagle_lab.engines.batched`,
:mod:`~peagle_lab.engines.fast`) run one loop: prefill, then ``step()`` until the request is done,
where a step is draft -> verify -> accept. AR is the same loop with K = 0 and no drafter (verifying
one token is decoding it). This module holds the parts that loop needs whatever the engine:

* :func:`check_request` -- the refusals every request gets (empty prompt, budget, sampling settings,
  method and drafter, the target's context window);
* :func:`accepted_prefix` -- the greedy accept rule on device tensors (how many leading drafts equal
  the target's choices), the one copy all engines and the offline replay use;
* :func:`finish` -- cut the output at the budget and after the first EOS;
* :class:`StepTimer` -- wall (or CUDA event) time per phase, measured around the calls so the
  algorithm's code holds no clocks.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ..compat import check_compatible
from ..stats import AcceptanceStats
from ..target import Generation

METHODS = ("ar", "eagle", "peagle", "dspark")


@dataclass
class StepTimes:
    """Wall time split of one generation (seconds)."""
    prefill: float = 0.0
    draft: float = 0.0
    verify: float = 0.0
    bookkeeping: float = 0.0

    def to_dict(self) -> dict:
        return {"prefill": self.prefill, "draft": self.draft, "verify": self.verify, "bookkeeping": self.bookkeeping}


@dataclass
class Step:
    """One speculative step, kept for the token-stream view: drafts, how many were accepted, next token."""
    drafts: list[int]
    accepted: int
    next_token: int


@dataclass
class SpecResult(Generation):
    acceptance: AcceptanceStats | None = None       # None for AR (K = 0)
    times: StepTimes = field(default_factory=StepTimes)
    steps: list[Step] = field(default_factory=list)


def context_limit(target) -> int | None:
    """The most positions the target was built for (``max_position_embeddings``), or None when unknown."""
    limit = getattr(getattr(target, "config", None), "max_position_embeddings", None)
    return int(limit) if limit else None


def _check_context(target, prompt_len: int, max_new_tokens: int, k: int) -> None:
    """The cache holds the prompt, the reply and, while verifying, up to ``k`` drafts ahead of it, so
    ``prompt_len + max_new_tokens + k`` must not exceed ``max_position_embeddings``."""
    limit = context_limit(target)
    need = prompt_len + max_new_tokens + k
    if limit is not None and need > limit:
        drafts = f" + K ({k}) draft slots" if k else ""
        raise ValueError(f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}){drafts} = {need} positions "
                         f"exceeds the target's context (max_position_embeddings {limit}); shorten the prompt "
                         f"to at most {max(0, limit - max_new_tokens - k)} tokens or lower max_new_tokens")


def require_parallel(drafter) -> None:
    """Refuse, naming the fix, a drafter that cannot draft in parallel (no P-EAGLE mask_hidden)."""
    if drafter.mask_hidden is None:
        raise ValueError("parallel drafting needs a P-EAGLE drafter (mask token + mask_hidden); "
                         "this one is sequential-only: use method 'eagle' or a P-EAGLE checkpoint")


def check_request(target, prompt_ids, max_new_tokens: int, *, method: str = "ar", drafter=None, k: int = 0,
                  temperature: float = 0.0, top_p: float = 1.0) -> int:
    """The checks one request gets in every engine -> the K it runs with (0 for AR).

    A prompt, a budget, sampling settings, a known method with a drafter that fits the target (and
    can draft in parallel for P-EAGLE), and room in the target's context for prompt + reply + K.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if len(prompt_ids) == 0:
        raise ValueError("prompt_ids is empty: pass at least one token (e.g. target.chat_ids(text))")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    k = 0 if method == "ar" else k
    _check_context(target, len(prompt_ids), max_new_tokens, k)
    if method == "ar":
        return 0
    if drafter is None:
        raise ValueError(f"method {method!r} needs a drafter (pass drafter=load_drafter(...))")
    if k < 1:
        raise ValueError("k (draft tokens per step) must be >= 1")
    is_dspark = hasattr(drafter, "markov_head")
    if is_dspark != (method == "dspark"):
        raise ValueError(f"method {method!r} cannot run a {'DSpark' if is_dspark else 'EAGLE-3/P-EAGLE'} drafter: "
                         f"use method {'dspark' if is_dspark else 'eagle or peagle'}, or load a matching drafter")
    check_compatible(drafter, target, k if method in ("peagle", "dspark") else None)
    if method == "peagle":
        require_parallel(drafter)
    return k


def accepted_prefix(drafts: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
    """The greedy accept rule: ``drafts (..., K)``, the target's choices ``choice (..., K+1)`` -> ``n (...)``,
    the number of leading drafts equal to the target's choice at their position (on their device, no sync).

    The next token is then ``choice[..., n]``: the target's correction, or a free bonus when all K matched.
    """
    return (drafts == choice[..., :-1]).long().cumprod(-1).sum(-1)


def finish(tokens: list[int], max_new_tokens: int, eos: tuple[int, ...]) -> tuple[list[int], bool]:
    """Cut at the token budget and after the first EOS; say whether generation is over."""
    for i, t in enumerate(tokens[:max_new_tokens]):
        if t in eos:
            return tokens[: i + 1], True
    return tokens[:max_new_tokens], len(tokens) >= max_new_tokens


class StepTimer:
    """Time an engine's phases from outside: ``with timer("draft"): ...`` adds to ``times.draft``.

    ``events=True`` (a CUDA device): the draft and verify phases are GPU time between CUDA events, and
    ``bookkeeping`` is the rest of the steps' host time; read :attr:`times` after the last step.
    """

    def __init__(self, events: bool = False):
        self._times, self.events = StepTimes(), events
        self._marks: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._host = 0.0                                  # with events: host seconds of every step phase

    @contextmanager
    def __call__(self, phase: str):
        events = self.events and phase != "prefill"
        if events:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        yield
        seconds = time.perf_counter() - t0
        if events:
            end.record()
            self._marks.append((phase, start, end))
            self._host += seconds
        else:
            setattr(self._times, phase, getattr(self._times, phase) + seconds)

    @property
    def times(self) -> StepTimes:
        if self._marks:
            torch.cuda.synchronize()
            gpu = {"draft": 0.0, "verify": 0.0}
            for phase, start, end in self._marks:
                if phase in gpu:
                    gpu[phase] += start.elapsed_time(end) / 1e3
            self._times.draft, self._times.verify = gpu["draft"], gpu["verify"]
            self._times.bookkeeping = max(0.0, self._host - gpu["draft"] - gpu["verify"])
        return self._times
