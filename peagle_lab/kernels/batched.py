"""Batched P-EAGLE drafting on a ragged batch, the way vLLM does it after the kernel.

1. :func:`copy_and_expand_eagle_inputs` lays out ids/positions/masks for every request;
2. :func:`scatter_hidden_states` moves each target hidden state to its output slot;
3. :func:`fill_mask_slots` puts ``fc(mask_hidden)`` into the mask slots with ``torch.where``
   (no host sync, no per-request loop);
4. one drafter forward over the packed batch, attention kept inside each request;
5. the drafts are read at ``new_token_indices`` (next-token slot + K-1 mask slots per request).

The engine's single-request :func:`peagle_lab.engines.drafting.draft_parallel` is the oracle: a batch of
requests must draft exactly what each request drafts alone.
"""
from __future__ import annotations

import torch

from ..drafter import Eagle3Drafter
from . import copy_and_expand_eagle_inputs


def scatter_hidden_states(hidden: torch.Tensor, mapping: torch.Tensor, out_len: int) -> torch.Tensor:
    """``hidden (T_in, D)`` -> ``(T_out, D)`` with row ``i`` at ``mapping[i]``; other rows zero."""
    out = hidden.new_zeros(out_len, hidden.shape[-1])
    out[mapping.long()] = hidden
    return out


def fill_mask_slots(hidden: torch.Tensor, is_masked: torch.Tensor, mask_value: torch.Tensor) -> torch.Tensor:
    """Mask slots get ``mask_value`` (``fc(mask_hidden)``, shape (D,) or (1, D)); others keep theirs."""
    return torch.where(is_masked[:, None], mask_value.reshape(1, -1).to(hidden.dtype), hidden)


def request_attention_mask(query_start_loc: torch.Tensor, k: int, is_rejected: torch.Tensor) -> torch.Tensor:
    """(T_out, T_out) bool: causal attention inside each request's output span; padding is never a key."""
    lens = query_start_loc[1:] - query_start_loc[:-1] + (k - 1)            # output slots per request (shift on)
    req = torch.repeat_interleave(torch.arange(lens.numel(), device=lens.device), lens.long())
    idx = torch.arange(req.numel(), device=lens.device)
    mask = (req[:, None] == req[None, :]) & (idx[None, :] <= idx[:, None]) & ~is_rejected[None, :]
    return mask | torch.eye(req.numel(), dtype=torch.bool, device=lens.device)  # padding rows see themselves


def drafter_inputs(drafter: Eagle3Drafter, target_token_ids, target_positions, target_aux, next_token_ids,
                   query_start_loc, query_end_loc, slots: int, padding_token_id: int = 0, backend: str = "auto"):
    """Steps 1-3: the kernel's layout with ``slots`` drafting slots per request (K for P-EAGLE: the next-token
    slot + K-1 mask slots; 1 for EAGLE-3's context pass) and the drafter's hidden input ``(T_out, H)``."""
    out = copy_and_expand_eagle_inputs(target_token_ids=target_token_ids, target_positions=target_positions,
                                       next_token_ids=next_token_ids, query_start_loc=query_start_loc,
                                       query_end_loc=query_end_loc, padding_token_id=padding_token_id,
                                       parallel_drafting_token_id=drafter.cfg.mask_token_id if slots > 1 else 0,
                                       num_padding_slots_per_request=slots, shift_input_ids=True, backend=backend)
    n_out = out.input_ids.numel()
    hidden = scatter_hidden_states(drafter.project(target_aux), out.hidden_state_mapping, n_out)   # (T_out, H)
    if slots > 1:                                                           # mask slots exist only then
        hidden = fill_mask_slots(hidden, out.is_masked_token_mask, drafter.projected_mask_hidden())
    return out, hidden


@torch.inference_mode()
def draft_parallel_batched(drafter: Eagle3Drafter, target_token_ids, target_positions, target_aux, next_token_ids,
                           query_start_loc, query_end_loc, k: int, padding_token_id: int = 0, backend: str = "auto"):
    """K greedy drafts per request for a ragged batch of prefills -> ``(num_reqs, K)`` target ids."""
    out, hidden = drafter_inputs(drafter, target_token_ids, target_positions, target_aux, next_token_ids,
                                 query_start_loc, query_end_loc, k, padding_token_id, backend)
    mask = request_attention_mask(query_start_loc, k, out.is_rejected_token_mask)
    _, logits = drafter(out.input_ids.long()[None], hidden[None], None, positions=out.positions[None], attn_mask=mask)
    picked = logits[0, out.new_token_indices.long()].argmax(-1)              # (B*K,)
    return drafter.to_target_ids(picked).view(-1, k)
