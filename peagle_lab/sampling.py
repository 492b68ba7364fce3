"""Turning logits into token choices, shared by AR generation, drafting and verification.

Temperature 0 means greedy (argmax). For T > 0 the distribution is ``softmax(logits / T)``,
optionally restricted to the smallest set of tokens whose mass reaches ``top_p`` (nucleus), and
renormalised. Speculative sampling is lossless with respect to exactly this distribution.
"""
from __future__ import annotations

import torch


def probs_from_logits(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Sampling distribution over the last dimension of ``logits`` (float32, rows sum to 1)."""
    if temperature <= 0:
        raise ValueError("temperature must be > 0 for a sampling distribution (0 means greedy)")
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        sorted_p = torch.where(mass_before < top_p, sorted_p, torch.zeros_like(sorted_p))
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``probs`` (shape ``(..., V)`` -> ``(...)``), on ``probs``' device.

    A seeded ``generator`` draws where it lives: the engines seed a CPU generator, so the same seed makes
    the same draws whether the target runs on the CPU or a GPU (probabilities on a GPU visit the CPU)."""
    if generator is not None and generator.device != probs.device:
        return sample(probs.to(generator.device), generator).to(probs.device)
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return out.reshape(probs.shape[:-1])


def choose(logits: torch.Tensor, temperature: float, top_p: float = 1.0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Greedy argmax at temperature 0, else a sample from :func:`probs_from_logits`."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    return sample(probs_from_logits(logits, temperature, top_p), generator)
