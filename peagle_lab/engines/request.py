"""One request's state, the same in every engine (nano-vllm's ``Sequence``), and the checks it gets.

The three engines (:mod:`~peagle_lab.engines.teaching`, :mod:`~peagle_lab.engines.batched`,
:mod:`~peagle_lab.engines.fast`) run one loop: prefill, then ``step()`` until the request is done,
where a step is draft -> verify -> accept. AR is the same loop with K = 0 and no drafter (verifying
one token is decoding it). What a step leaves on the host is the same whatever the engine: K drafts,
how many the target accepted, and the target's own token after them. A :class:`Request` keeps that:

>>> req = Request(prompt=[1, 2], budget=4, eos=(0,), k=3)
>>> req.append([], 0, 7)                  # the prefill's token
False
>>> req.append([5, 6, 9], 2, 8)           # drafts 5 6 accepted, 9 rejected: the target said 8
True
>>> req.tokens, req.stats.acceptance_length, req.steps[0].next_token
([7, 5, 6, 8], 3.0, 8)

Naming: the target's token is what verification emits after the accepted drafts (``next_token``):
the target's correction where a draft was rejected, or -- when all K were accepted -- one more token,
which vLLM calls the *bonus* token. The word bonus is kept for that case only.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..compat import check_compatible
from ..stats import AcceptanceStats
from ..target import Generation
from .timing import StepTimes

METHODS = ("ar", "eagle", "peagle", "dspark")   # the drafting methods an engine runs (each engine: one table)


@dataclass
class Step:
    """One speculative step, kept for the token-stream view: drafts, how many were accepted, the target's token."""
    drafts: list[int]
    accepted: int
    next_token: int


@dataclass
class SpecResult(Generation):
    acceptance: AcceptanceStats | None = None       # None for AR (K = 0)
    times: StepTimes = field(default_factory=StepTimes)
    steps: list[Step] = field(default_factory=list)


def finish(tokens: list[int], max_new_tokens: int, eos: tuple[int, ...]) -> tuple[list[int], bool]:
    """Cut at the token budget and after the first EOS; say whether generation is over."""
    for i, t in enumerate(tokens[:max_new_tokens]):
        if t in eos:
            return tokens[: i + 1], True
    return tokens[:max_new_tokens], len(tokens) >= max_new_tokens


@dataclass
class Request:
    """A request between steps: its prompt, the tokens emitted so far (cut at ``budget`` and after the first
    of ``eos``), the acceptance and steps of a speculative run (K > 0; none for AR), and when it finished."""
    prompt: list[int]
    budget: int
    eos: tuple[int, ...] = ()
    k: int = 0
    tokens: list[int] = field(default_factory=list)
    stats: AcceptanceStats | None = None
    steps: list[Step] = field(default_factory=list)
    done: bool = False
    started: float = field(default_factory=time.perf_counter)
    seconds: float = 0.0                                   # from ``started`` to the step that finished it

    def __post_init__(self):
        if self.k and self.stats is None:
            self.stats = AcceptanceStats(self.k)

    def append(self, drafts: list[int], accepted: int, next_token: int) -> bool:
        """One verified step: ``accepted`` leading ``drafts`` kept, then the target's ``next_token`` -> done.
        The prefill emits its token the same way, with no drafts (and AR steps have none either)."""
        if drafts:
            self.stats.record(accepted)
            self.steps.append(Step(list(drafts), accepted, next_token))
        self.tokens, self.done = finish(self.tokens + list(drafts[:accepted]) + [next_token], self.budget, self.eos)
        if self.done:
            self.seconds = time.perf_counter() - self.started
        return self.done

    def result(self, times: StepTimes | None = None, **stats) -> SpecResult:
        return SpecResult(tokens=self.tokens, prompt_len=len(self.prompt), seconds=self.seconds, acceptance=self.stats,
                          times=times if times is not None else StepTimes(), steps=self.steps, stats=stats)


@dataclass
class Outputs:
    """What an engine's ``generate`` over several prompts gives: one result per prompt, in order."""
    results: list[SpecResult]                               # one per request, in input order
    seconds: float                                          # wall time of all of them
    times: StepTimes = field(default_factory=StepTimes)
    accepted: list[dict[int, int]] = field(default_factory=list)   # batched: per step, {request: accepted drafts}

    @property
    def new_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.results)


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
    check_compatible(drafter, target, k, parallel=method != "eagle")       # K is bounded where drafts are parallel
    if method == "peagle":
        require_parallel(drafter)
    return k
