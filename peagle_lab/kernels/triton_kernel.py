"""The fused Triton kernel: one program per (request, block of output slots).

Same contract as :func:`peagle_lab.kernels.reference.copy_and_expand_eagle_inputs_torch` and as
vLLM's ``copy_and_expand_eagle_inputs_kernel``: every output slot ``j`` of request ``r`` decides
from ``j`` alone which region it is in (copied token, the target's next token, mask slot, rejected padding), so the
whole ragged batch is rebuilt in one launch with no host round trip.
"""
from __future__ import annotations

import functools
import os


try:
    import triton
    import triton.language as tl
except ImportError:  # the torch reference still works without Triton
    triton = tl = None


def _expand_body(token_ids_ptr, positions_ptr, next_ids_ptr,
                 out_ids_ptr, out_pos_ptr, out_rejected_ptr, out_masked_ptr, out_new_idx_ptr, out_map_ptr,
                 qsl_ptr, qel_ptr, padding_token_id, mask_token_id, total_input_tokens, K,
                 SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)          # output slots of request r handled here
    start = tl.load(qsl_ptr + r)
    nxt = tl.load(qsl_ptr + r + 1)
    end = tl.load(qel_ptr + r)
    if SHIFT:
        n_valid = end - start                                    # tokens start+1 .. end
        src = start + 1 + j
        base = start + r * (K - 1)
    else:
        n_valid = end - start + 1                                # tokens start .. end
        src = start + j
        base = start + r * K
    n_rejected = nxt - end - 1
    total = n_valid + K + n_rejected
    live = j < total
    valid = j < n_valid
    next_slot = j == n_valid
    masked = (j > n_valid) & (j < n_valid + K)
    rejected = j >= n_valid + K

    ids = tl.load(token_ids_ptr + tl.minimum(src, total_input_tokens - 1), mask=valid & live, other=0)
    ids = tl.where(next_slot, tl.load(next_ids_ptr + r), ids)
    ids = tl.where(masked, mask_token_id, ids)
    ids = tl.where(rejected, padding_token_id, ids)
    pos = tl.load(positions_ptr + start) + j
    pos = tl.where(rejected, 0, pos)

    dst = base + j
    tl.store(out_ids_ptr + dst, ids, mask=live)
    tl.store(out_pos_ptr + dst, pos, mask=live)
    tl.store(out_rejected_ptr + dst, rejected & live, mask=live)
    tl.store(out_masked_ptr + dst, masked & live, mask=live)
    new_slot = (j >= n_valid) & (j < n_valid + K) & live
    tl.store(out_new_idx_ptr + r * K + (j - n_valid), dst, mask=new_slot)
    if SHIFT:                                                    # hidden state of input token start+j -> slot dst
        tl.store(out_map_ptr + start + j, dst, mask=j < nxt - start)


@functools.cache
def jit(body, interpret: bool):
    """``body`` jitted for the GPU, or for Triton's CPU interpreter (``interpret=True``): Triton reads
    ``TRITON_INTERPRET`` when it wraps a function, so it is set for that moment only."""
    if triton is None:
        raise RuntimeError("Triton is not installed: pip install triton (or use backend='torch')")
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        return triton.jit(body)
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET")
        else:
            os.environ["TRITON_INTERPRET"] = old


def compiled(interpret: bool):
    """The layout kernel jitted for the GPU, or for Triton's CPU interpreter (``interpret=True``)."""
    return jit(_expand_body, interpret)
