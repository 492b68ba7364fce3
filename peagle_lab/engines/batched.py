"""Batched speculative decoding: B requests at once, each accepting its own number of drafts.

``generate_batch(target, [prompt_ids, ...], method=..., drafter=..., k=...)`` runs the same
algorithm as :func:`peagle_lab.engines.teaching.generate` for a whole batch, the way vLLM lays it out:

1. **one target prefill** over the right-padded prompts (:class:`~peagle_lab.engines.batch_cache.RaggedCache`);
2. **drafting on vLLM's packed ragged layout**: the last target pass of every request (prompt,
   or the target's last token + K drafts with ``num_rejected = K - n_r``) goes through
   :func:`~peagle_lab.kernels.copy_and_expand_eagle_inputs`, then vLLM's companion steps
   (scatter of target features by ``hidden_state_mapping``, ``torch.where`` fill of the mask slots
   with ``fc(mask_hidden)``), then ONE drafter pass over all requests (P-EAGLE), or one context
   pass plus K-1 one-token-per-request passes (EAGLE-3), against the drafter's pooled KV cache
   (:class:`~peagle_lab.engines.batch_cache.DraftPool`). DSpark needs no kernel: each request's
   accepted rows become context K/V in the pool (``fc(aux)`` per layer), then ONE pass over every
   request's block ``[x_P, K-1 masks]`` and the Markov head, one slot at a time for all rows;
3. **one target forward verifies every request** (``(B, K+1)`` tokens, per-row cache lengths);
4. per row: accept ``n_r`` (greedy), commit ``1 + n_r`` slots, append to the row's
   :class:`~peagle_lab.engines.request.Request`, finish or go on. Finished requests leave the batch
   (their rows and pool slots are dropped).

Greedy only: every request's output equals what it would get alone, which equals plain AR
decoding (tested). Sampling in a batch is not implemented -- use batch size 1 for T > 0.
Methods: ``"eagle"``, ``"peagle"``, ``"dspark"`` (:data:`POOLED_DRAFTERS`); ``"ar"`` is the same loop
with K = 0 (one target forward per token for all rows).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..device import sdpa_without_cudnn
from ..drafter import Eagle3Drafter
from ..kernels.batched import drafter_inputs, request_attention_mask
from .batch_cache import DraftPool, RaggedCache
from .request import Outputs, Request, check_request, require_parallel
from .timing import StepTimer
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
    next_token_ids: torch.Tensor   # (R,) int32: the target's new tokens (vLLM's name)


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
    at = out.new_token_indices.long()                                     # (R,) each request's next-token slot
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


def _accepted_rows(ctx: Packed) -> tuple[torch.Tensor, torch.Tensor]:
    """The packed rows up to each request's last accepted token -> ``(rows (n,), their request index (n,) in R)``."""
    qsl = ctx.query_start_loc.long()
    row_of = torch.repeat_interleave(torch.arange(ctx.req.numel(), device=qsl.device), qsl[1:] - qsl[:-1])  # (N,)
    rows = torch.nonzero(torch.arange(row_of.numel(), device=qsl.device) <= ctx.query_end_loc.long()[row_of])
    return rows.flatten(), row_of[rows.flatten()]


@torch.inference_mode()
def draft_markov_pooled(drafter, pool: DraftPool, ctx: Packed, k: int) -> torch.Tensor:
    """DSpark for the batch: the accepted rows' context K/V (``fc(aux)``, one row per target position) into the
    pool, ONE packed pass over every request's block ``[x_P, K-1 masks]`` (causal inside a block, which sees its
    own request's context), then the Markov head left to right for all requests at once -> ``(R, K)`` target ids.
    The block slots never enter the pool."""
    rows, row_of = _accepted_rows(ctx)
    pos = ctx.positions[rows]                                                   # (n,) target positions
    pool.extend(ctx.req[row_of], pos, drafter.context_kv(ctx.aux[rows][None], pos[None]))
    R, dev = ctx.req.numel(), ctx.req.device
    ids = torch.full((R, k), drafter.cfg.mask_token_id, dtype=torch.long, device=dev)
    ids[:, 0] = ctx.next_token_ids.long()                                       # x_P: the target's new token
    first = ctx.positions[ctx.query_end_loc.long()] + 1                         # (R,) P: the position of x_P
    positions = first[:, None] + torch.arange(k, device=dev)                    # (R, K)
    block_req = ctx.req.repeat_interleave(k)                                    # (R*K,) owner of each block slot
    idx = torch.arange(R * k, device=dev)
    causal = (block_req[:, None] == block_req[None, :]) & (idx[None, :] <= idx[:, None])     # (R*K, R*K)
    mask = torch.cat([pool.visible(block_req), causal], dim=1)                 # (R*K, S + R*K)
    ctx_kv = list(zip(pool.cache.keys, pool.cache.values))
    normed = drafter.block(ids.view(1, -1), positions.view(1, -1), ctx_kv, mask[None, None])[0]   # (R*K, H)
    base = drafter.lm_head(normed).view(R, k, -1)                               # (R, K, Vd)
    prev, drafts = ids[:, 0], []
    for i in range(k):                                                          # slot i told slot i-1's pick
        prev = drafter.to_target_ids((base[:, i] + drafter.markov_head(prev).to(base.dtype)).argmax(-1))
        drafts.append(prev)
    return torch.stack(drafts, dim=1)                                           # (R, K)


POOLED_DRAFTERS = {"eagle": draft_sequential_pooled, "peagle": draft_parallel_pooled, "dspark": draft_markov_pooled}


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


def prefill(reqs: list[Request], rows: RaggedCache, spec: bool, dev) -> tuple[list[int], torch.Tensor, Packed | None]:
    """One target pass over the right-padded prompts: every request's first token; the drafter's first
    context (each running request's prompt with its features) -> ``(running, next tokens (R,), ctx)``."""
    prompts = [r.prompt for r in reqs]
    B = len(prompts)
    lens = torch.tensor([len(p) for p in prompts])
    out = rows.forward(_pad(prompts), aux=spec)                                # logits (B, L, V)
    rows.commit(lens)
    first = out.logits[torch.arange(B), lens - 1].argmax(-1).cpu()             # (B,)
    live = [r for r in range(B) if not reqs[r].append([], 0, int(first[r]))]
    ctx = None
    if spec and live:
        qsl = torch.cat([torch.zeros(1, dtype=torch.long), lens[live].cumsum(0)]).to(torch.int32)
        ctx = _packed(dev, req=torch.tensor(live), token_ids=torch.cat([torch.tensor(prompts[r]) for r in live]),
                      positions=torch.cat([torch.arange(len(prompts[r])) for r in live]),
                      aux=torch.cat([out.aux[r, : len(prompts[r])] for r in live]),
                      query_start_loc=qsl, query_end_loc=qsl[1:] - 1, next_token_ids=first[live])
    return live, first[live], ctx                                              # (R,) for the rows still running


class Batch:
    """The running requests between steps: their :class:`~peagle_lab.engines.request.Request` s, target rows,
    the drafter pool, the target's last tokens and the drafter's next context (the last target pass, packed)."""

    def __init__(self, rows: RaggedCache, pool: DraftPool | None, drafter, draft_fn, k: int):
        self.rows, self.pool, self.drafter, self.draft_fn, self.k = rows, pool, drafter, draft_fn, k
        self.spec = draft_fn is not None
        self.live: list[int] = []                          # requests still running, in batch-row order
        self.accepted_log: list[dict[int, int]] = []       # per step: {request: accepted drafts}

    def prefill(self, reqs: list[Request]) -> None:
        self.reqs = reqs
        device = self.pool.device if self.pool else None
        self.live, self.next_token, self.ctx = prefill(reqs, self.rows, self.spec, device)
        _drop(self.rows, self.pool, self.live, list(range(len(reqs))))

    def draft(self) -> torch.Tensor:
        """``(R, K)`` drafts for the running requests (``(R, 0)`` for AR)."""
        if not self.spec:
            return torch.zeros(len(self.live), 0, dtype=torch.long)
        return self.draft_fn(self.drafter, self.pool, self.ctx, self.k).cpu()

    def verify(self, drafts: torch.Tensor):
        """One target pass over ``[last token, drafts]`` of every row
        -> ``(n (R,), next token (R,), verify_in, out, before)``."""
        before = self.rows.lengths.clone()
        verify_in = torch.cat([self.next_token[:, None], drafts], dim=1)       # (R, K+1)
        out = self.rows.forward(verify_in, aux=self.spec)                      # logits (R, K+1, V)
        n, next_token = verify_greedy_batch(drafts, out.logits)                # (R,) accepted, (R,) target's token
        self.rows.commit(1 + n)
        return n, next_token, verify_in, out, before

    def accept(self, drafts, n, next_token, verify_in, out, before) -> None:
        """Every row's request gets its step; the next context from the rows still running; finished ones leave."""
        live = self.live
        still = [i for i, r in enumerate(live)
                 if not self.reqs[r].append(drafts[i].tolist(), int(n[i]), int(next_token[i]))]
        if self.spec:
            self.accepted_log.append({r: int(n[i]) for i, r in enumerate(live)})
            K1 = self.k + 1
            keep = torch.tensor(still, dtype=torch.long)
            qsl = (torch.arange(len(still) + 1) * K1).to(torch.int32)
            self.ctx = _packed(self.pool.device, req=torch.tensor([live[i] for i in still], dtype=torch.long),
                               token_ids=verify_in[keep].flatten(),
                               positions=(before[keep][:, None] + torch.arange(K1)).flatten(),
                               aux=out.aux[keep.to(out.aux.device)].reshape(-1, out.aux.shape[-1]),
                               query_start_loc=qsl, query_end_loc=qsl[:-1] + n[keep], next_token_ids=next_token[keep])
        self.live = [live[i] for i in still]
        _drop(self.rows, self.pool, self.live, live)
        self.next_token = next_token[still]

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
                   stop_at_eos: bool = True) -> Outputs:
    """Greedy generation for a batch of prompts (token id lists) with ``method`` ar / eagle / peagle / dspark."""
    budgets, k, draft_fn = _check(target, prompts, method, drafter, k, max_new_tokens, temperature)
    eos, t0 = target.eos_token_ids if stop_at_eos else (), time.perf_counter()
    reqs = [Request(list(p), budget, eos, k if draft_fn else 0, started=t0) for p, budget in zip(prompts, budgets)]
    pool = DraftPool(drafter, next(drafter.parameters()).device) if draft_fn else None  # the drafter's side lives there
    batch, timer = Batch(RaggedCache(target, len(prompts)), pool, drafter, draft_fn, k), StepTimer()
    with sdpa_without_cudnn(target.device):      # every step has a new cache length: no per-shape cuDNN plans
        with timer("prefill"):
            batch.prefill(reqs)
        while batch.live:
            batch.step(timer)
    return Outputs(results=[r.result() for r in reqs], seconds=time.perf_counter() - t0, times=timer.times,
                   accepted=batch.accepted_log)


def _drop(rows: RaggedCache, pool: DraftPool | None, still: list[int], live: list[int]) -> None:
    """Finished requests leave the batch: their cache rows and drafter pool slots go."""
    if len(still) == len(live) or not still:
        return
    rows.keep_rows(torch.tensor([live.index(r) for r in still]))
    if pool is not None:
        pool.keep_requests(torch.tensor(still, device=pool.device))
