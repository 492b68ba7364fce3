"""The teaching engine: prefill, then draft, verify, accept, roll back, repeat.

``generate(target, prompt_ids, method=...)`` runs one of

* ``"ar"``     -- plain autoregressive decoding: the same loop with K = 0 and no drafter
  (verifying the target's last token alone is decoding it);
* ``"eagle"``  -- EAGLE-3 sequential drafting (K drafter passes per step);
* ``"peagle"`` -- P-EAGLE parallel drafting (one drafter pass per step).

Whatever the method, greedy output equals AR output token for token and sampled output is
distributed as the target's: the drafter only changes how fast tokens arrive.
"""
from __future__ import annotations

import torch

from ..device import sdpa_without_cudnn
from ..drafter import Eagle3Drafter
from ..sampling import choose, probs_from_logits
from ..target import Target
from .drafting import DRAFTERS, Draft
from .request import Request, SpecResult, check_request
from .timing import StepTimer
from .verify import verify_greedy, verify_sampling


class Decode:
    """The teaching engine's state for one request between steps: the :class:`~peagle_lab.engines.request.Request`,
    the target and drafter caches, the target's last token (emitted, not yet in the target cache) and the
    drafter's new context slots (slot ``j``: target features at ``j``, token at ``j+1``).

    ``aux`` is vLLM's name for those features: the target's hidden states at the tapped layers, ``(T, 3H)``."""

    def __init__(self, target: Target, drafter: Eagle3Drafter | None, method: str, k: int, temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None):
        self.target, self.drafter, self.k = target, drafter, k
        self.draft_fn = DRAFTERS[method] if k else None
        self.temperature, self.top_p = temperature, top_p
        self.gen = torch.Generator().manual_seed(seed) if seed is not None else None
        self.tcache = target.new_cache()
        self.dcache = drafter.new_cache() if k else None

    def prefill(self, req: Request) -> None:
        """The prompt through the target: the first token, and the drafter's first context."""
        self.req = req
        self.prompt = torch.tensor(req.prompt, device=self.target.device)               # (T,)
        out = self.target.forward(self.prompt, self.tcache, aux=self.k > 0)   # logits (1, T, V), aux (1, T, 3H)
        self.next_token = int(choose(out.logits[0, -1].cpu(), self.temperature, self.top_p, self.gen))
        if self.k:
            self.ctx_tokens = torch.cat([self.prompt[1:], self.prompt.new_tensor([self.next_token])])   # (T,)
            self.ctx_aux = out.aux[0]                                                  # (T, 3H)
        req.append([], 0, self.next_token)

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
        """The target scores ``[its last token, drafts]`` (K+1 positions) -> ``(n accepted, next token, output)``."""
        self.base = self.target.cache_length(self.tcache)
        last = self.prompt.new_tensor([self.next_token])
        verify_in = torch.cat([last, draft.tokens.to(self.prompt.device)])             # (K+1,)
        out = self.target.forward(verify_in, self.tcache, aux=self.k > 0)
        logits = out.logits[0].cpu()                                                   # (K+1, V)
        if self.temperature <= 0:
            n, next_token = verify_greedy(draft.tokens.cpu(), logits)
        else:
            q = draft.probs.cpu() if draft.probs is not None else None
            n, next_token = verify_sampling(draft.tokens.cpu(), q,
                                            probs_from_logits(logits, self.temperature, self.top_p), self.gen)
        return n, next_token, out

    def accept(self, draft: Draft, n: int, next_token: int, out) -> None:
        """Keep the last token + ``n`` drafts in the target cache; the request gets them and the target's next token."""
        self.target.rollback(self.tcache, self.base + 1 + n)
        accepted = draft.tokens[:n].tolist()
        if self.k:
            self.ctx_tokens = torch.tensor(accepted + [next_token], device=self.prompt.device)   # (n+1,)
            self.ctx_aux = out.aux[0, : n + 1]                                                  # (n+1, 3H)
        self.next_token = next_token
        self.req.append(draft.tokens.tolist(), n, next_token)

    def step(self, timer: StepTimer) -> None:
        with timer("draft"):
            draft = self.draft()
        with timer("verify"):
            n, next_token, out = self.verify(draft)
        with timer("bookkeeping"):
            self.accept(draft, n, next_token, out)


@torch.inference_mode()
def generate(target: Target, prompt_ids: list[int], *, method: str = "peagle", drafter: Eagle3Drafter | None = None,
             k: int = 5, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
             seed: int | None = None, stop_at_eos: bool = True) -> SpecResult:
    """Generate up to ``max_new_tokens`` after ``prompt_ids`` with the chosen method."""
    k = check_request(target, prompt_ids, max_new_tokens, method=method, drafter=drafter, k=k,
                      temperature=temperature, top_p=top_p)
    req = Request(list(prompt_ids), max_new_tokens, target.eos_token_ids if stop_at_eos else (), k)
    timer = StepTimer()
    # on CUDA: no per-shape cuDNN plans (each step meets a new cache length)
    with sdpa_without_cudnn(target.device):
        state = Decode(target, drafter, method, k, temperature, top_p, seed)
        with timer("prefill"):
            state.prefill(req)
        while not req.done:
            state.step(timer)
    return req.result(timer.times)
