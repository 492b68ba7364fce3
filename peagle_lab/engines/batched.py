"""Batched speculative decoding: B requests at once, each accepting its own number of drafts.

``generate_batch(target, [prompt_ids, ...], method=..., drafter=..., k=...)`` runs the same
algorithm as :func:`peagle_lab.engines.teaching.generate` for a whole batch, the way vLLM lays it out:

1. **one target prefill** over the right-padded prompts (:class:`~peagle_lab.engines.batch_cache.RaggedCache`);
2. **drafting on vLLM's packed ragged layout**: the last target pass of every request (prompt,
   or bonus + K drafts with ``num_rejected = K - n_r``) goes through
   :func:`~peagle_lab.kernels.copy_and_expand_eagle_inputs`, then vLLM's companion steps
   (scatter of target features by ``hidden_state_mapping``, ``torch.where`` fill of the mask slots
   with ``fc(mask_hidden)``), then ONE drafter pass over all requests (P-EAGLE), or one context
   pass plus K-1 one-token-per-request passes (EAGLE-3), against the drafter's pooled KV cache
   (:class:`~peagle_lab.engines.batch_cache.DraftPool`);
3. **one target forward verifies every request** (``(B, K+1)`` tokens, per-row cache lengths);
4. per row: accept ``n_r`` (greedy), commit ``1 + n_r`` slots, record, finish or go on. Finished
   requests leave the batch (their rows and pool slots are dropped).

Greedy only: every request's output equals what it would get alone, which equals plain AR
decoding (tested). Sampling in a batch is not implemented -- use batch size 1 for T > 0.
Method ``"ar"`` is the same loop with K = 0 (one target forward per token for all rows).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..device import sdpa_without_cudnn
from ..drafter import Eagle3Drafter
from ..kernels.batched import drafter_inputs, request_attention_mask
from ..stats import AcceptanceStats
from .batch_cache import DraftPool, RaggedCache
from .frame import SpecResult, Step, StepTimer, StepTimes, check_request, finish, require_parallel
from .verify import verify_greedy_batch


@dataclass
class Packed:
    """The target's last pass for the requests still running, packed the way vLLM's kernel reads it."""
    req: torch.Tensor              # (R,) request ids (index in the original batch)
    token_ids: torch.Tensor        # (N,) int32, all requests' query tokens back to back
    positions: torch.Tensor        # (N,) position of each token
    aux: torch.Tensor              # (N, 3H) target features at each token
    query_start_loc: torch.Tensor  # (R+1,) int32
    query_end_loc: torch.Tensor    # (R,) int32: index of each request's last accepted token
    next_token_ids: torch.Tensor   # (R,) int32: the new bonus tokens


@dataclass
class BatchResult:
    results: list[SpecResult]                               # one per request, in input order
    seconds: float                                          # wall time of the whole batch
    times: StepTimes = field(default_factory=StepTimes)
    accepted: list[dict[int, int]] = field(default_factory=list)   # per step: {request: accepted drafts}

    @property
    def new_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.results)


def _layout(drafter: Eagle3Drafter, ctx: Packed, slots: int):
    """Kernel + companion steps: drafter ids, hidden, positions and the per-slot request ids."""
    out, hidden = drafter_inputs(drafter, ctx.token_ids, ctx.positions, ctx.aux, ctx.next_token_ids,
                                 ctx.query_start_loc, ctx.query_end_loc, slots)
    lens = ctx.query_start_loc[1:] - ctx.query_start_loc[:-1] + (slots - 1)                    # (R,) slots each
    slot_req = torch.repeat_interleave(ctx.req, lens.long())                                   # (T_out,)
    return out, hidden, slot_req


def _pass(drafter, pool: DraftPool, ids, hidden, positions, slot_req, new_block):
    """One drafter forward on the packed row against the pool; records the appended slots."""
    mask = torch.cat([pool.visible(slot_req), new_block], dim=1)                                # (T, S+T)
    prenorm, logits = drafter(ids.long()[None], hidden[None], pool.cache, positions=positions[None], attn_mask=mask)
    pool.append(slot_req, positions)
    return prenorm[0], logits[0]


@torch.inference_mode()
def draft_parallel_pooled(drafter: Eagle3Drafter, pool: DraftPool, ctx: Packed, k: int) -> torch.Tensor:
    """P-EAGLE for the batch: one packed pass, K greedy drafts per request -> ``(R, K)`` target ids."""
    require_parallel(drafter)
    out, hidden, slot_req = _layout(drafter, ctx, k)
    start = pool.length
    _, logits = _pass(drafter, pool, out.input_ids, hidden, out.positions, slot_req,
                      request_attention_mask(ctx.query_start_loc, k, out.is_rejected_token_mask))
    drafts = drafter.to_target_ids(logits[out.new_token_indices.long()].argmax(-1)).view(-1, k)
    pool.commit(start, ~out.is_masked_token_mask & ~out.is_rejected_token_mask)   # context slots stay
    return drafts


@torch.inference_mode()
def draft_sequential_pooled(drafter: Eagle3Drafter, pool: DraftPool, ctx: Packed, k: int) -> torch.Tensor:
    """EAGLE-3 for the batch: a packed context pass (kernel with one slot each), then K-1 passes of
    one token per request on the previous draft and the drafter's own pre-norm state."""
    out, hidden, slot_req = _layout(drafter, ctx, 1)
    start = pool.length
    prenorm, logits = _pass(drafter, pool, out.input_ids, hidden, out.positions, slot_req,
                            request_attention_mask(ctx.query_start_loc, 1, out.is_rejected_token_mask))
    at = out.new_token_indices.long()                                     # (R,) each request's bonus slot
    tok, h, pos = drafter.to_target_ids(logits[at].argmax(-1)), prenorm[at], out.positions[at]
    pool.commit(start, ~out.is_rejected_token_mask)
    committed, drafts = pool.length, [tok]
    eye = torch.eye(ctx.req.numel(), dtype=torch.bool, device=ctx.req.device)
    for _ in range(k - 1):
        pos = pos + 1
        h, logits = _pass(drafter, pool, tok, h, pos, ctx.req, eye)
        tok = drafter.to_target_ids(logits.argmax(-1))
        drafts.append(tok)
    pool.truncate(committed)                                              # speculative slots go
    return torch.stack(drafts, dim=1)                                     # (R, K)


POOLED_DRAFTERS = {"eagle": draft_sequential_pooled, "peagle": draft_parallel_pooled}


def _packed(device, *, req, token_ids, positions, aux, query_start_loc, query_end_loc, next_token_ids) -> Packed:
    """Everything the drafter side reads, on the drafter's device, in the kernel's dtypes."""
    i32 = dict(device=device, dtype=torch.int32)
    return Packed(req=req.to(device=device, dtype=torch.long), token_ids=token_ids.to(**i32),
                  positions=positions.to(device=device, dtype=torch.long),
                  aux=aux.to(device=device, dtype=torch.float32),
                  query_start_loc=query_start_loc.to(**i32), query_end_loc=query_end_loc.to(**i32),
                  next_token_ids=next_token_ids.to(**i32))


def _pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows])      # (B, width)


def _check(target, prompts: list[list[int]], method: str, drafter: Eagle3Drafter | None, k: int,
           max_new_tokens: int | list[int], temperature: float):
    """Refuse what the batched engine cannot run -> ``(budgets, K, pooled drafting function or None for "ar")``."""
    if temperature > 0:
        raise ValueError("batched decoding is greedy only (temperature 0); for sampling use batch size 1 "
                         "(peagle_lab.engines.teaching.generate, or peagle-lab bench --batch-size 1)")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate_batch needs a non-empty list of non-empty prompts (token id lists)")
    B = len(prompts)
    budgets = [max_new_tokens] * B if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(budgets) != B or min(budgets) < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1 or one such int per prompt ({B}), got {max_new_tokens!r}")
    for i, (p, budget) in enumerate(zip(prompts, budgets)):
        try:
            k = check_request(target, p, budget, method=method, drafter=drafter, k=k)
        except ValueError as err:
            raise ValueError(f"request {i}: {err}") from None
    return budgets, k, POOLED_DRAFTERS.get(method) if k else None


@dataclass
class _Requests:
    """Each request's output so far (in input order) and which ones still run."""
    budgets: list[int]
    eos: tuple[int, ...]
    k: int
    spec: bool
    t0: float = field(default_factory=time.perf_counter)
    live: list[int] = field(default_factory=list)           # requests still running, in batch-row order

    def __post_init__(self):
        B = len(self.budgets)
        self.tokens: list[list[int]] = [[] for _ in range(B)]
        self.stats = [AcceptanceStats(self.k) if self.spec else None for _ in range(B)]
        self.steps: list[list[Step]] = [[] for _ in range(B)]
        self.finished_at = [0.0] * B

    def extend(self, r: int, new: list[int]) -> bool:
        """Append ``new`` to request ``r`` (cut at its budget / EOS); True when it is done."""
        self.tokens[r], done = finish(self.tokens[r] + new, self.budgets[r], self.eos)
        if done:
            self.finished_at[r] = time.perf_counter() - self.t0
        return done

    def accept(self, r: int, drafts: torch.Tensor, n: int, bonus: int) -> bool:
        """Record one verified step of request ``r``: ``n`` drafts accepted, then ``bonus``."""
        if self.spec:
            self.stats[r].record(n)
            self.steps[r].append(Step(drafts.tolist(), n, bonus))
        return self.extend(r, drafts[:n].tolist() + [bonus])

    def results(self, prompts: list[list[int]]) -> list[SpecResult]:
        return [SpecResult(tokens=self.tokens[r], prompt_len=len(prompts[r]), seconds=self.finished_at[r],
                           acceptance=self.stats[r], steps=self.steps[r]) for r in range(len(prompts))]


def prefill(req: _Requests, rows: RaggedCache, prompts: list[list[int]], dev) -> tuple[torch.Tensor, Packed | None]:
    """One target pass over the right-padded prompts: every request's first token; the drafter's first
    context (each running request's prompt with its features) -> ``(bonus (R,), ctx)``."""
    B = len(prompts)
    lens = torch.tensor([len(p) for p in prompts])
    out = rows.forward(_pad(prompts), aux=req.spec)                            # logits (B, L, V)
    rows.commit(lens)
    bonus = out.logits[torch.arange(B), lens - 1].argmax(-1).cpu()             # (B,)
    live = req.live = [r for r in range(B) if not req.extend(r, [int(bonus[r])])]
    ctx = None
    if req.spec and live:
        qsl = torch.cat([torch.zeros(1, dtype=torch.long), lens[live].cumsum(0)]).to(torch.int32)
        ctx = _packed(dev, req=torch.tensor(live), token_ids=torch.cat([torch.tensor(prompts[r]) for r in live]),
                      positions=torch.cat([torch.arange(len(prompts[r])) for r in live]),
                      aux=torch.cat([out.aux[r, : len(prompts[r])] for r in live]),
                      query_start_loc=qsl, query_end_loc=qsl[1:] - 1, next_token_ids=bonus[live])
    return bonus[live], ctx                                                    # (R,) for the rows still running


class Batch:
    """The running requests between steps: their target rows, the drafter pool, the bonus tokens and the
    drafter's next context (the last target pass, packed)."""

    def __init__(self, req: _Requests, rows: RaggedCache, pool: DraftPool | None, drafter, draft_fn):
        self.req, self.rows, self.pool, self.drafter, self.draft_fn = req, rows, pool, drafter, draft_fn
        self.accepted_log: list[dict[int, int]] = []       # per step: {request: accepted drafts}

    def prefill(self, prompts: list[list[int]]) -> None:
        self.bonus, self.ctx = prefill(self.req, self.rows, prompts, self.pool.device if self.pool else None)
        _drop(self.rows, self.pool, self.req.live, list(range(len(prompts))))

    def draft(self) -> torch.Tensor:
        """``(R, K)`` drafts for the running requests (``(R, 0)`` for AR)."""
        if not self.req.spec:
            return torch.zeros(len(self.req.live), 0, dtype=torch.long)
        return self.draft_fn(self.drafter, self.pool, self.ctx, self.req.k).cpu()

    def verify(self, drafts: torch.Tensor):
        """One target pass over ``[bonus, drafts]`` of every row
        -> ``(n (R,), next token (R,), verify_in, out, before)``."""
        before = self.rows.lengths.clone()
        verify_in = torch.cat([self.bonus[:, None], drafts], dim=1)            # (R, K+1)
        out = self.rows.forward(verify_in, aux=self.req.spec)                  # logits (R, K+1, V)
        n, bonus = verify_greedy_batch(drafts, out.logits)                     # (R,) accepted, (R,) next token
        self.rows.commit(1 + n)
        return n, bonus, verify_in, out, before

    def accept(self, drafts, n, bonus, verify_in, out, before) -> None:
        """Record every row's step; the next context from the rows still running; finished requests leave."""
        req, live = self.req, self.req.live
        still = [i for i, r in enumerate(live) if not req.accept(r, drafts[i], int(n[i]), int(bonus[i]))]
        if req.spec:
            self.accepted_log.append({r: int(n[i]) for i, r in enumerate(live)})
            K1 = req.k + 1
            keep = torch.tensor(still, dtype=torch.long)
            qsl = (torch.arange(len(still) + 1) * K1).to(torch.int32)
            self.ctx = _packed(self.pool.device, req=torch.tensor([live[i] for i in still], dtype=torch.long),
                               token_ids=verify_in[keep].flatten(),
                               positions=(before[keep][:, None] + torch.arange(K1)).flatten(),
                               aux=out.aux[keep.to(out.aux.device)].reshape(-1, out.aux.shape[-1]),
                               query_start_loc=qsl, query_end_loc=qsl[:-1] + n[keep], next_token_ids=bonus[keep])
        req.live = [live[i] for i in still]
        _drop(self.rows, self.pool, req.live, live)
        self.bonus = bonus[still]

    def step(self, timer: StepTimer) -> None:
        with timer("draft"):
            drafts = self.draft()
        with timer("verify"):
            verified = self.verify(drafts)
        with timer("bookkeeping"):
            self.accept(drafts, *verified)


@torch.inference_mode()
def generate_batch(target, prompts: list[list[int]], *, method: str = "peagle", drafter: Eagle3Drafter | None = None,
                   k: int = 5, max_new_tokens: int | list[int] = 128, temperature: float = 0.0,
                   stop_at_eos: bool = True) -> BatchResult:
    """Greedy generation for a batch of prompts (token id lists) with ``method`` ar / eagle / peagle."""
    budgets, k, draft_fn = _check(target, prompts, method, drafter, k, max_new_tokens, temperature)
    spec = draft_fn is not None
    req = _Requests(budgets, target.eos_token_ids if stop_at_eos else (), k, spec)
    pool = DraftPool(drafter, next(drafter.parameters()).device) if spec else None   # the drafter's side lives there
    batch, timer = Batch(req, RaggedCache(target, len(prompts)), pool, drafter, draft_fn), StepTimer()
    with sdpa_without_cudnn(target.device):      # every step has a new cache length: no per-shape cuDNN plans
        with timer("prefill"):
            batch.prefill(prompts)
        while req.live:
            batch.step(timer)
    return BatchResult(results=req.results(prompts), seconds=time.perf_counter() - req.t0, times=timer.times,
                       accepted=batch.accepted_log)


def _drop(rows: RaggedCache, pool: DraftPool | None, still: list[int], live: list[int]) -> None:
    """Finished requests leave the batch: their cache rows and drafter pool slots go."""
    if len(still) == len(live) or not still:
        return
    rows.keep_rows(torch.tensor([live.index(r) for r in still]))
    if pool is not None:
        pool.keep_requests(torch.tensor(still, device=pool.device))
