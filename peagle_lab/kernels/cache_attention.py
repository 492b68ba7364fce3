"""Attention of a few query rows over a static KV cache: the fast engine's decode / verify attention.

A step of the fast engine asks one KV head group for ``R = rep * T`` query rows (``T`` = 1 token at
decode, K + 1 at verify; ``rep`` query heads share each KV head) against a cache of ``S`` slots of
which only the first few hundred are live. ``F.scaled_dot_product_attention`` with a mask over the
whole cache picks a tiled prefill kernel for this: on the H200 ~17 us per layer for 3 rows x 832
slots, 42% of SmolLM2-135M's whole decode step (``benchmarks/gpu/step_profile.py``, docs/fast-engine.md).

This is the split-over-the-cache scheme of flash-decoding, in two small Triton kernels:

1. ``split``: one program per (KV head, block of ``BLOCK_S`` slots) scores all ``R`` rows against its
   block (row ``r * T + t`` sees slot ``s`` iff ``s <= positions[t]``), and keeps the block's row
   maxima ``m``, softmax sums ``l`` and unnormalised outputs ``o`` (float32). Blocks past the last
   live slot load nothing (masked loads), so the cost follows the live length, not ``S``;
2. ``combine``: one program per KV head merges its live blocks' ``(m, l, o)`` into the softmax output.

The positions come from a device tensor, so the call has fixed shapes and fits in a captured CUDA
graph. :func:`cache_attention_torch` is the reference (SDPA with the same mask); on CPU the Triton
path runs in Triton's interpreter, which is what the tests use.
"""
from __future__ import annotations  # annotations stay text: no Triton needed to import, and its interpreter reads them

import functools

import torch
import torch.nn.functional as F

from .triton_kernel import jit, tl, triton

BLOCK_S = 64                    # cache slots per split program
MAX_ROWS = 128                  # query rows one program holds (decode and verify); a prompt's pass goes to SDPA


# tl.max / tl.sum are jitted helpers that Triton's interpreter can call only if TRITON_INTERPRET was set
# before triton was imported; tl.reduce with the standard combine functions (what they wrap) runs both
# compiled and interpreted, so the kernels call it directly.
_MAX, _SUM = (tl.standard._elementwise_max, tl.standard._sum_combine) if tl is not None else (None, None)


def cache_attention_torch(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                          positions: torch.Tensor) -> torch.Tensor:
    """Reference: ``q (G, R, hd)`` rows ``r * T + t`` over ``keys / values (G, S, hd)``, row ``r * T + t``
    seeing slots ``<= positions[t]`` -> ``(G, R, hd)`` in ``q``'s dtype."""
    T, S = positions.shape[0], keys.shape[1]
    allowed = torch.arange(S, device=q.device)[None, :] <= positions[:, None]      # (T, S)
    mask = allowed.repeat(q.shape[1] // T, 1)                                      # (R, S)
    return F.scaled_dot_product_attention(q[None], keys[None], values[None], attn_mask=mask)[0]


def _split_body(q_ptr, k_ptr, v_ptr, pos_ptr, o_ptr, m_ptr, l_ptr, R, T, S, scale,
                HD: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, IEEE: tl.constexpr):
    g = tl.program_id(0)
    blk = tl.program_id(1)
    rows = tl.arange(0, BLOCK_R)
    d = tl.arange(0, HD)
    slots = blk * BLOCK_S + tl.arange(0, BLOCK_S)
    live_r = rows < R
    pos = tl.load(pos_ptr + rows % T, mask=live_r, other=-1)                       # (BLOCK_R,) each row's last slot
    live_s = (slots < S) & (slots <= tl.reduce(pos, 0, _MAX))                      # (BLOCK_S,) slots anyone sees
    q = tl.load(q_ptr + (g * R + rows[:, None]) * HD + d[None, :], mask=live_r[:, None], other=0.0)
    kv_off = (g * S + slots[:, None]) * HD + d[None, :]
    k = tl.load(k_ptr + kv_off, mask=live_s[:, None], other=0.0)                   # (BLOCK_S, HD)
    if IEEE:
        scores = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        scores = tl.dot(q, tl.trans(k))
    seen = (slots[None, :] <= pos[:, None]) & live_s[None, :]
    scores = tl.where(seen, scores * scale, float("-inf"))                         # (BLOCK_R, BLOCK_S) float32
    m = tl.reduce(scores, 1, _MAX)
    p = tl.exp(scores - tl.where(m == float("-inf"), 0.0, m)[:, None])             # 0 where unseen
    v = tl.load(v_ptr + kv_off, mask=live_s[:, None], other=0.0)
    if IEEE:
        o = tl.dot(p.to(v.dtype), v, input_precision="ieee")
    else:
        o = tl.dot(p.to(v.dtype), v)                                                # (BLOCK_R, HD) float32
    part = g * tl.num_programs(1) + blk
    tl.store(m_ptr + part * BLOCK_R + rows, m)
    tl.store(l_ptr + part * BLOCK_R + rows, tl.reduce(p, 1, _SUM))
    tl.store(o_ptr + (part * BLOCK_R + rows[:, None]) * HD + d[None, :], o)


def _combine_body(o_ptr, m_ptr, l_ptr, pos_ptr, out_ptr, R, T, NBLK: tl.constexpr,
                  HD: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, ALL_BLOCKS: tl.constexpr):
    g = tl.program_id(0)
    rows = tl.arange(0, BLOCK_R)
    d = tl.arange(0, HD)
    pos = tl.load(pos_ptr + rows % T, mask=rows < R, other=-1)
    live = tl.minimum(tl.reduce(pos, 0, _MAX) // BLOCK_S + 1, NBLK)   # blocks past the last live slot saw nothing
    big_m = tl.full((BLOCK_R,), float("-inf"), tl.float32)
    big_l = tl.full((BLOCK_R,), 0.0, tl.float32)
    acc = tl.full((BLOCK_R, HD), 0.0, tl.float32)
    # Compiled, the loop stops after the live blocks. Triton 3.6's interpreter cannot take a tensor as a loop bound
    # under NumPy >= 2.4 (it holds a 1-element array, not a 0-d one), so interpreted the loop walks every block up
    # to the constexpr NBLK (one compile per cache size) and masks the dead ones.
    for blk in range(0, NBLK if ALL_BLOCKS else live):     # running log-sum-exp merge of the live blocks
        part = g * NBLK + blk
        ok = rows * 0 + blk < live                  # (BLOCK_R,): a dead block reads as m = -inf, o = l = 0
        m = tl.load(m_ptr + part * BLOCK_R + rows, mask=ok, other=float("-inf"))
        new_m = tl.maximum(big_m, m)
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        a, b = tl.exp(big_m - safe), tl.exp(m - safe)
        o = tl.load(o_ptr + (part * BLOCK_R + rows[:, None]) * HD + d[None, :], mask=ok[:, None], other=0.0)
        acc = acc * a[:, None] + o * b[:, None]
        big_l = big_l * a + tl.load(l_ptr + part * BLOCK_R + rows, mask=ok, other=0.0) * b
        big_m = new_m
    out = acc / tl.where(big_l > 0, big_l, 1.0)[:, None]          # padding rows (>= R) saw nothing
    tl.store(out_ptr + (g * R + rows[:, None]) * HD + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=(rows < R)[:, None])


@functools.cache
def _kernels(interpret: bool):
    return jit(_split_body, interpret), jit(_combine_body, interpret)


def check_shapes(q: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor) -> None:
    """Errors that name the fix, before any launch."""
    hd = q.shape[-1]
    if hd < 16 or hd & (hd - 1):
        raise ValueError(f"attention='triton' needs a power-of-two head dim >= 16 (this model's is {hd}): "
                         "use attention='sdpa'")
    if not q.is_cuda and q.dtype == torch.bfloat16:
        raise ValueError("Triton's CPU interpreter computes bfloat16 dot products wrongly: on a CPU use float32 "
                         "(or float16), or attention='sdpa'")
    if q.shape[1] % positions.shape[0]:
        raise ValueError(f"q has {q.shape[1]} rows, not a multiple of the {positions.shape[0]} positions "
                         "(rows are r*T+t)")
    if keys.shape[0] != q.shape[0] or keys.shape[2] != hd:
        raise ValueError(f"keys {tuple(keys.shape)} do not match q {tuple(q.shape)}: expected (G, S, hd)")


def cache_attention_triton(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                           positions: torch.Tensor) -> torch.Tensor:
    """The two kernels (compiled on CUDA, Triton's interpreter on CPU); same contract as the reference."""
    if triton is None:
        raise RuntimeError("Triton is not installed: pip install triton (or use attention='sdpa')")
    check_shapes(q, keys, positions)
    if q.shape[1] > MAX_ROWS:
        raise ValueError(f"{q.shape[1]} query rows: one program holds at most {MAX_ROWS} (a step's rows); "
                         "a prompt's pass goes through attend_cache, which hands it to SDPA")
    q, keys, values = q.contiguous(), keys.contiguous(), values.contiguous()
    G, R, hd = q.shape
    S = keys.shape[1]
    block_r = max(16, triton.next_power_of_2(R))
    nblk = triton.cdiv(S, BLOCK_S)
    f32 = dict(dtype=torch.float32, device=q.device)
    o = torch.empty(G, nblk, block_r, hd, **f32)
    m = torch.empty(G, nblk, block_r, **f32)
    l = torch.empty(G, nblk, block_r, **f32)
    out = torch.empty_like(q)
    split, combine = _kernels(not q.is_cuda)
    ieee = q.dtype == torch.float32                 # float32 exactly (no TF32): the lossless oracle runs in float32
    split[(G, nblk)](q, keys, values, positions, o, m, l, R, positions.shape[0], S, hd ** -0.5,
                     HD=hd, BLOCK_R=block_r, BLOCK_S=BLOCK_S, IEEE=ieee, num_warps=4)
    combine[(G,)](o, m, l, positions, out, R, positions.shape[0], nblk, HD=hd, BLOCK_R=block_r, BLOCK_S=BLOCK_S,
                  ALL_BLOCKS=not q.is_cuda, num_warps=4)
    return out


def attend_cache(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """What the fast engine calls: the Triton op for a step's few rows (``R <= MAX_ROWS``: decode, verify,
    a drafting pass), the masked SDPA reference for a prompt's pass (hundreds of rows would not fit in
    one program's registers; the prompt runs once, eagerly)."""
    if q.shape[1] <= MAX_ROWS:
        return cache_attention(q, keys, values, positions)
    return cache_attention_torch(q, keys, values, positions)


@torch.library.custom_op("peagle_lab::cache_attention", mutates_args=())
def cache_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """:func:`cache_attention_triton` as a torch op: ``torch.compile`` keeps it whole (two launches)
    and fuses what is around it."""
    return cache_attention_triton(q, keys, values, positions)


@cache_attention.register_fake
def _(q, keys, values, positions):
    return q.new_empty(q.shape)                     # contiguous, as the kernels write it


__all__ = ["attend_cache", "cache_attention", "cache_attention_torch", "cache_attention_triton", "BLOCK_S", "MAX_ROWS"]
