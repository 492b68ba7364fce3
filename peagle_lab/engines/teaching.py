"""The teaching engine: prefill, then draft, verify, accept, roll back, repeat.

``generate(target, prompt_ids, method=...)`` runs one of

* ``"ar"``     -- plain autoregressive decoding: the same loop with K = 0 and no drafter
  (verifying the bonus token alone is decoding it);
* ``"eagle"``  -- EAGLE-3 sequential drafting (K drafter passes per step);
* ``"peagle"`` -- P-EAGLE parallel drafting (one drafter pass per step).

Whatever the method, greedy output equals AR output token for token and sampled output is
distributed as the target's: the drafter only changes how fast tokens arrive.
"""
from __future__ import annotations

import time

import torch

from ..device import sdpa_without_cudnn
from ..drafter import Eagle3Drafter
from ..sampling import choose, probs_from_logits
from ..stats import AcceptanceStats
from ..target import Target
from .drafting import DRAFTERS, Draft
from .frame import SpecResult, Step, StepTimer, check_request, finish
from .verify import verify_greedy, verify_sampling


class Decode:
    """One request's state between steps: caches, the bonus token (emitted, not yet in the target
    cache) and the drafter's new context slots (slot ``j``: target features at ``j``, token at ``j+1``)."""

    def __init__(self, target: Target, drafter: Eagle3Drafter | None, method: str, k: int, temperature: float,
                 top_p: float, seed: int | None, eos: tuple[int, ...], max_new_tokens: int):
        self.target, self.drafter, self.k = target, drafter, k
        self.draft_fn = DRAFTERS[method] if k else None
        self.temperature, self.top_p, self.eos, self.budget = temperature, top_p, eos, max_new_tokens
        self.gen = torch.Generator().manual_seed(seed) if seed is not None else None
        self.stats, self.steps = (AcceptanceStats(k) if k else None), []
        self.tcache = target.new_cache()
        self.dcache = drafter.new_cache() if k else None
        self.tokens, self.done = [], False

    def prefill(self, prompt_ids: list[int]) -> None:
        """The prompt through the target: the first token, and the drafter's first context."""
        self.prompt = torch.tensor(prompt_ids, device=self.target.device)               # (T,)
        out = self.target.forward(self.prompt, self.tcache, aux=self.k > 0)   # logits (1, T, V), aux (1, T, 3H)
        self.bonus = int(choose(out.logits[0, -1].cpu(), self.temperature, self.top_p, self.gen))
        if self.k:
            self.ctx_tokens = torch.cat([self.prompt[1:], self.prompt.new_tensor([self.bonus])])   # (T,)
            self.ctx_aux = out.aux[0]                                                  # (T, 3H)
        self.tokens, self.done = finish([self.bonus], self.budget, self.eos)

    def draft(self) -> Draft:
        """K proposals from the new context; the drafter's speculative and mask slots are dropped again."""
        if not self.k:
            return Draft(self.prompt.new_zeros(0).cpu(), None)                         # AR: nothing to propose
        keep = self.dcache.length + self.ctx_tokens.shape[0]
        draft = self.draft_fn(self.drafter, self.dcache, self.ctx_tokens, self.ctx_aux, self.k, self.temperature,
                              self.gen)
        self.dcache.crop(keep)
        return draft

    def verify(self, draft: Draft):
        """The target scores ``[bonus, drafts]`` (K+1 positions) -> ``(n accepted, next token, target output)``."""
        self.base = self.target.cache_length(self.tcache)
        verify_in = torch.cat([self.prompt.new_tensor([self.bonus]), draft.tokens.to(self.prompt.device)])  # (K+1,)
        out = self.target.forward(verify_in, self.tcache, aux=self.k > 0)
        logits = out.logits[0].cpu()                                                   # (K+1, V)
        if self.temperature <= 0:
            n, bonus = verify_greedy(draft.tokens.cpu(), logits)
        else:
            q = draft.probs.cpu() if draft.probs is not None else None
            n, bonus = verify_sampling(draft.tokens.cpu(), q, probs_from_logits(logits, self.temperature, self.top_p),
                                       self.gen)
        return n, bonus, out

    def accept(self, draft: Draft, n: int, bonus: int, out) -> None:
        """Keep the old bonus + ``n`` drafts in the target cache, emit them and the next token."""
        self.target.rollback(self.tcache, self.base + 1 + n)
        accepted = draft.tokens[:n].tolist()
        if self.k:
            self.stats.record(n)
            self.steps.append(Step(draft.tokens.tolist(), n, bonus))
            self.ctx_tokens = torch.tensor(accepted + [bonus], device=self.prompt.device)   # (n+1,)
            self.ctx_aux = out.aux[0, : n + 1]                                             # (n+1, 3H)
        self.bonus = bonus
        self.tokens, self.done = finish(self.tokens + accepted + [bonus], self.budget, self.eos)

    def step(self, timer: StepTimer) -> None:
        with timer("draft"):
            draft = self.draft()
        with timer("verify"):
            n, bonus, out = self.verify(draft)
        with timer("bookkeeping"):
            self.accept(draft, n, bonus, out)


@torch.inference_mode()
def generate(target: Target, prompt_ids: list[int], *, method: str = "peagle", drafter: Eagle3Drafter | None = None,
             k: int = 5, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
             seed: int | None = None, stop_at_eos: bool = True) -> SpecResult:
    """Generate up to ``max_new_tokens`` after ``prompt_ids`` with the chosen method."""
    k = check_request(target, prompt_ids, max_new_tokens, method=method, drafter=drafter, k=k,
                      temperature=temperature, top_p=top_p)
    eos = target.eos_token_ids if stop_at_eos else ()
    timer, t0 = StepTimer(), time.perf_counter()
    # on CUDA: no per-shape cuDNN plans (each step meets a new cache length)
    with sdpa_without_cudnn(target.device):
        state = Decode(target, drafter, method, k, temperature, top_p, seed, eos, max_new_tokens)
        with timer("prefill"):
            state.prefill(prompt_ids)
        while not state.done:
            state.step(timer)
    return SpecResult(tokens=state.tokens, prompt_len=len(prompt_ids), seconds=time.perf_counter() - t0,
                      acceptance=state.stats, times=timer.times, steps=state.steps)
