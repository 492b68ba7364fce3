"""Stage 4: rebuilding the drafter's ragged batch input on the device, vLLM-style.

>>> out = copy_and_expand_eagle_inputs(
...     target_token_ids=torch.tensor([10, 11, 12, 13, 20, 21, 22, 23], dtype=torch.int32),
...     target_positions=torch.tensor([5, 6, 7, 8, 10, 11, 12, 13]),
...     next_token_ids=torch.tensor([100, 200], dtype=torch.int32),
...     query_start_loc=torch.tensor([0, 4, 8], dtype=torch.int32),
...     query_end_loc=torch.tensor([2, 7], dtype=torch.int32),      # request 0 rejected one token
...     padding_token_id=0, parallel_drafting_token_id=-2, num_padding_slots_per_request=3)
>>> out.input_ids.tolist()
[11, 12, 100, -2, -2, 0, 21, 22, 23, 200, -2, -2]
>>> out.positions.tolist()
[5, 6, 7, 8, 9, 0, 10, 11, 12, 13, 14, 15]
>>> out.new_token_indices.tolist()
[2, 3, 4, 9, 10, 11]
"""
from __future__ import annotations

import os

import torch

from .reference import EagleInputs, copy_and_expand_eagle_inputs_torch, output_length

BLOCK = 128                     # most output slots one program handles


def launch_config(per_request: int) -> tuple[int, int]:
    """(BLOCK, num_warps) for requests of up to ``per_request`` output slots.

    Decode batches have K + 1 + K slots per request: one small program each (16 lanes, one warp)
    does the job; long prefills take 128-slot blocks with 4 warps."""
    block = min(BLOCK, max(16, 1 << max(0, per_request - 1).bit_length()))
    return block, 1 if block <= 32 else 2 if block <= 64 else 4


def _kernel_outputs(n_in: int, num_reqs: int, k: int, shift: bool, device) -> EagleInputs:
    """Outputs the kernel overwrites completely: ``torch.empty`` (no fill kernels before the launch).

    ``hidden_state_mapping`` is only written with shift, so without shift it is zeroed as the
    reference does. ``PEAGLE_KERNEL_POISON=1`` fills everything with garbage first, so the tests
    prove that the kernel writes every slot.
    """
    n_out = output_length(n_in, num_reqs, k, shift)
    out = EagleInputs(
        input_ids=torch.empty(n_out, dtype=torch.int32, device=device),
        positions=torch.empty(n_out, dtype=torch.int64, device=device),
        is_rejected_token_mask=torch.empty(n_out, dtype=torch.bool, device=device),
        is_masked_token_mask=torch.empty(n_out, dtype=torch.bool, device=device),
        new_token_indices=torch.empty(num_reqs * k, dtype=torch.int32, device=device),
        hidden_state_mapping=(torch.empty if shift else torch.zeros)(n_in, dtype=torch.int32, device=device))
    if os.environ.get("PEAGLE_KERNEL_POISON") == "1":
        for name, t in vars(out).items():
            if shift or name != "hidden_state_mapping":
                t.fill_(True if t.dtype == torch.bool else -7)
    return out


def copy_and_expand_eagle_inputs(*, target_token_ids, target_positions, next_token_ids, query_start_loc,
                                 query_end_loc, padding_token_id: int, parallel_drafting_token_id: int,
                                 num_padding_slots_per_request: int, shift_input_ids: bool = True,
                                 backend: str = "auto", max_query_len: int | None = None,
                                 launch: tuple[int, int] | None = None) -> EagleInputs:
    """Build the drafter input for a ragged batch (see :mod:`peagle_lab.kernels.reference`).

    ``backend``: ``"triton"`` (GPU, or Triton's interpreter on CPU), ``"torch"`` (the reference),
    or ``"auto"`` = Triton on CUDA tensors, and on CPU the reference unless ``TRITON_INTERPRET=1``.
    ``max_query_len`` (longest query in the batch) sizes the grid; pass it to avoid a host sync.
    ``launch``: (BLOCK, num_warps) instead of :func:`launch_config`'s choice (benchmarks compare them).
    """
    k = num_padding_slots_per_request
    if k < 1:
        raise ValueError("num_padding_slots_per_request (K) must be >= 1")
    on_gpu = target_token_ids.is_cuda
    if backend == "auto":
        backend = "triton" if on_gpu or os.environ.get("TRITON_INTERPRET") == "1" else "torch"
    args = dict(target_token_ids=target_token_ids, target_positions=target_positions, next_token_ids=next_token_ids,
                query_start_loc=query_start_loc, query_end_loc=query_end_loc, padding_token_id=padding_token_id,
                parallel_drafting_token_id=parallel_drafting_token_id, num_padding_slots_per_request=k,
                shift_input_ids=shift_input_ids)
    if backend == "torch":
        return copy_and_expand_eagle_inputs_torch(**args)
    if backend != "triton":
        raise ValueError(f"unknown backend {backend!r}; use auto, triton or torch")
    from .triton_kernel import compiled

    num_reqs = query_end_loc.numel()
    n_in = target_token_ids.numel()
    out = _kernel_outputs(n_in, num_reqs, k, shift_input_ids, target_token_ids.device)
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max()) if num_reqs else 0
    per_request = max_query_len + k                              # output slots of the longest request
    block, warps = launch or launch_config(per_request)
    grid = (num_reqs, (per_request + block - 1) // block)
    compiled(not on_gpu)[grid](
        target_token_ids, target_positions, next_token_ids,
        out.input_ids, out.positions, out.is_rejected_token_mask, out.is_masked_token_mask,
        out.new_token_indices, out.hidden_state_mapping,
        query_start_loc, query_end_loc, padding_token_id, parallel_drafting_token_id, n_in, k,
        SHIFT=shift_input_ids, BLOCK=block, num_warps=warps)
    return out


__all__ = ["EagleInputs", "copy_and_expand_eagle_inputs", "copy_and_expand_eagle_inputs_torch"]
