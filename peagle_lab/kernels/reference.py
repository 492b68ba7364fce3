"""Plain-torch reference for vLLM's parallel-drafting input preparation.

Given a ragged batch of the target's last query tokens, build the drafter's input for P-EAGLE:
per request ``r`` with query ``[qsl[r], qsl[r+1])`` of which ``qel[r]`` is the last accepted
token (``num_rejected = qsl[r+1] - 1 - qel[r]``) the output holds, with ``shift_input_ids``::

    [tokens qsl+1 .. qel] [next token] [K-1 mask ids] [padding for each rejected token]

positions ``start_pos + j`` (0 on rejected slots), starting at output offset ``qsl[r] + r*(K-1)``;
without shift the valid tokens are ``qsl .. qel``, the mask slots K and the offset
``qsl[r] + r*K``. Also returned: which slots are rejected / masked, the ``B*K`` output indices of
the next-token and mask slots (where the drafter samples), and -- with shift -- for every input token
the output slot its hidden state goes to.

This is the "naive multi-op version a user would write": a Python loop over requests, each a
handful of small torch ops. It is the oracle the Triton kernel is tested against.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class EagleInputs:
    input_ids: torch.Tensor              # (T_out,) int32
    positions: torch.Tensor              # (T_out,) int64
    is_rejected_token_mask: torch.Tensor  # (T_out,) bool
    is_masked_token_mask: torch.Tensor   # (T_out,) bool
    new_token_indices: torch.Tensor      # (B*K,) int32: next-token + mask slots, request-major
    hidden_state_mapping: torch.Tensor   # (T_in,) int32: input token -> output slot (shift only)


def output_length(num_input_tokens: int, num_reqs: int, k: int, shift_input_ids: bool) -> int:
    return num_input_tokens + num_reqs * (k - 1 if shift_input_ids else k)


def empty_outputs(num_input_tokens: int, num_reqs: int, k: int, shift_input_ids: bool, device) -> EagleInputs:
    n_out = output_length(num_input_tokens, num_reqs, k, shift_input_ids)
    return EagleInputs(
        input_ids=torch.zeros(n_out, dtype=torch.int32, device=device),
        positions=torch.zeros(n_out, dtype=torch.int64, device=device),
        is_rejected_token_mask=torch.zeros(n_out, dtype=torch.bool, device=device),
        is_masked_token_mask=torch.zeros(n_out, dtype=torch.bool, device=device),
        new_token_indices=torch.zeros(num_reqs * k, dtype=torch.int32, device=device),
        hidden_state_mapping=torch.zeros(num_input_tokens, dtype=torch.int32, device=device),
    )


def copy_and_expand_eagle_inputs_torch(target_token_ids, target_positions, next_token_ids, query_start_loc,
                                       query_end_loc, padding_token_id: int, parallel_drafting_token_id: int,
                                       num_padding_slots_per_request: int, shift_input_ids: bool = True) -> EagleInputs:
    k = num_padding_slots_per_request
    qsl, qel = query_start_loc.tolist(), query_end_loc.tolist()
    num_reqs = len(qel)
    out = empty_outputs(target_token_ids.numel(), num_reqs, k, shift_input_ids, target_token_ids.device)
    for r in range(num_reqs):
        start, nxt, end = qsl[r], qsl[r + 1], qel[r]
        num_rejected = nxt - end - 1
        if shift_input_ids:
            valid = target_token_ids[start + 1: end + 1]
            offset = start + r * (k - 1)
        else:
            valid = target_token_ids[start: end + 1]
            offset = start + r * k
        n_valid = valid.numel()
        total = n_valid + k + num_rejected
        sl = slice(offset, offset + total)
        ids = torch.cat([valid.to(torch.int32),
                         next_token_ids[r: r + 1].to(torch.int32),
                         torch.full((k - 1,), parallel_drafting_token_id, dtype=torch.int32, device=valid.device),
                         torch.full((num_rejected,), padding_token_id, dtype=torch.int32, device=valid.device)])
        out.input_ids[sl] = ids
        pos = target_positions[start] + torch.arange(total, device=valid.device)
        pos[n_valid + k:] = 0
        out.positions[sl] = pos
        out.is_rejected_token_mask[offset + n_valid + k: offset + total] = True
        out.is_masked_token_mask[offset + n_valid + 1: offset + n_valid + k] = True
        first_new = offset + n_valid
        out.new_token_indices[r * k: (r + 1) * k] = torch.arange(first_new, first_new + k, dtype=torch.int32)
        if shift_input_ids:
            out.hidden_state_mapping[start: nxt] = torch.arange(offset, offset + (nxt - start), dtype=torch.int32)
    return out
