"""The speculative decoding engine: prefill, draft, verify, accept, roll back, repeat.

``generate(target, prompt_ids, method=...)`` runs one of

* ``"ar"``     -- plain autoregressive decoding (one target forward per token);
* ``"eagle"``  -- EAGLE-3 sequential drafting (K drafter passes per step);
* ``"peagle"`` -- P-EAGLE parallel drafting (one drafter pass per step).

Whatever the method, greedy output equals AR output token for token and sampled output is
distributed as the target's: the drafter only changes how fast tokens arrive.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .compat import check_compatible
from .device import sdpa_without_cudnn
from .drafter import Eagle3Drafter
from .drafting import DRAFTERS
from .sampling import choose, probs_from_logits
from .stats import AcceptanceStats
from .target import Generation, Target
from .verify import verify_greedy, verify_sampling

METHODS = ("ar", "eagle", "peagle")


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
    acceptance: AcceptanceStats | None = None
    times: StepTimes = field(default_factory=StepTimes)
    steps: list[Step] = field(default_factory=list)


def context_limit(target) -> int | None:
    """The most positions the target was built for (``max_position_embeddings``), or None when unknown."""
    limit = getattr(getattr(target, "config", None), "max_position_embeddings", None)
    return int(limit) if limit else None


def check_context(target, prompt_len: int, max_new_tokens: int, k: int = 0) -> None:
    """Refuse a request that would run past the target's context window (every engine calls this).

    The cache holds the prompt, the reply and, while verifying, up to ``k`` drafts ahead of it, so
    ``prompt_len + max_new_tokens + k`` must not exceed ``max_position_embeddings``.
    """
    limit = context_limit(target)
    need = prompt_len + max_new_tokens + k
    if limit is not None and need > limit:
        drafts = f" + K ({k}) draft slots" if k else ""
        raise ValueError(f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}){drafts} = {need} positions "
                         f"exceeds the target's context (max_position_embeddings {limit}); shorten the prompt "
                         f"to at most {max(0, limit - max_new_tokens - k)} tokens or lower max_new_tokens")


def check_request(target, prompt_ids, max_new_tokens: int, k: int = 0, temperature: float = 0.0,
                  top_p: float = 1.0) -> None:
    """The checks one request gets in every engine: a prompt, a budget, sampling settings, the context."""
    if len(prompt_ids) == 0:
        raise ValueError("prompt_ids is empty: pass at least one token (e.g. target.chat_ids(text))")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    check_context(target, len(prompt_ids), max_new_tokens, k)


def _finish(tokens: list[int], max_new_tokens: int, eos: tuple[int, ...]) -> tuple[list[int], bool]:
    """Cut at the token budget and after the first EOS; say whether generation is over."""
    for i, t in enumerate(tokens[:max_new_tokens]):
        if t in eos:
            return tokens[: i + 1], True
    return tokens[:max_new_tokens], len(tokens) >= max_new_tokens


@torch.inference_mode()
def generate(target: Target, prompt_ids: list[int], *, method: str = "peagle", drafter: Eagle3Drafter | None = None,
             k: int = 5, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
             seed: int | None = None, stop_at_eos: bool = True) -> SpecResult:
    """Generate up to ``max_new_tokens`` after ``prompt_ids`` with the chosen method."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    check_request(target, prompt_ids, max_new_tokens, k if method != "ar" else 0, temperature, top_p)
    if method == "ar":
        with sdpa_without_cudnn(target.device):          # the same attention backends as the speculative loop
            g = target.generate(prompt_ids, max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
                                stop_at_eos=stop_at_eos)
        return SpecResult(tokens=g.tokens, prompt_len=g.prompt_len, seconds=g.seconds)
    if drafter is None:
        raise ValueError(f"method {method!r} needs a drafter (pass drafter=load_drafter(...))")
    if k < 1:
        raise ValueError("k (draft tokens per step) must be >= 1")
    check_compatible(drafter, target, k if method == "peagle" else None)
    draft_fn = DRAFTERS[method]
    eos = target.eos_token_ids if stop_at_eos else ()
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    stats, times, steps = AcceptanceStats(k), StepTimes(), []
    device = target.device

    with sdpa_without_cudnn(device):       # on CUDA: no per-shape cuDNN plans (each step meets a new cache length)
        t0 = time.perf_counter()
        tcache, dcache = target.new_cache(), drafter.new_cache()
        prompt = torch.tensor(prompt_ids, device=device)
        out = target.forward(prompt, tcache)                                    # logits (1, T, V), aux (1, T, 3H)
        bonus = int(choose(out.logits[0, -1].cpu(), temperature, top_p, gen))
        tokens = [bonus]
        # Drafter slot j pairs target features at position j with the token at j+1.
        ctx_tokens = torch.cat([prompt[1:], prompt.new_tensor([bonus])])        # (T,)
        ctx_aux = out.aux[0]                                                    # (T, 3H)
        times.prefill = time.perf_counter() - t0
        tokens, done = _finish(tokens, max_new_tokens, eos)

        while not done:
            t1 = time.perf_counter()
            keep = dcache.length + ctx_tokens.shape[0]
            draft = draft_fn(drafter, dcache, ctx_tokens, ctx_aux, k, temperature, gen)
            dcache.crop(keep)                                                   # drop speculative / mask slots
            t2 = time.perf_counter()
            base = target.cache_length(tcache)
            verify_in = torch.cat([prompt.new_tensor([bonus]), draft.tokens.to(device)])  # (K+1,)
            out = target.forward(verify_in, tcache)                            # scores K+1 positions
            logits = out.logits[0].cpu()                                        # (K+1, V)
            if temperature <= 0:
                n, bonus = verify_greedy(draft.tokens.cpu(), logits)
            else:
                n, bonus = verify_sampling(draft.tokens.cpu(), draft.probs.cpu(),
                                           probs_from_logits(logits, temperature, top_p), gen)
            t3 = time.perf_counter()
            target.rollback(tcache, base + 1 + n)                               # keep old bonus + n accepted
            accepted = draft.tokens[:n].tolist()
            stats.record(n)
            steps.append(Step(draft.tokens.tolist(), n, bonus))
            tokens, done = _finish(tokens + accepted + [bonus], max_new_tokens, eos)
            ctx_tokens = torch.tensor(accepted + [bonus], device=device)        # (n+1,)
            ctx_aux = out.aux[0, : n + 1]                                       # (n+1, 3H)
            times.draft += t2 - t1
            times.verify += t3 - t2
            times.bookkeeping += time.perf_counter() - t3
    return SpecResult(tokens=tokens, prompt_len=len(prompt_ids), seconds=time.perf_counter() - t0,
                      acceptance=stats, times=times, steps=steps)
