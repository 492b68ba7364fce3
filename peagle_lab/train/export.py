"""Exports beyond vLLM's plain EAGLE-3 layout.

:func:`export_speculators` writes the *speculators* format (vLLM >= 0.33 also reads it): the same
safetensors weights with a ``config.json`` whose ``speculators_model_type`` is ``"peagle"`` (or
``"eagle3"``), the drafter's decoder shape as an HF ``transformer_layer_config``, and a
``speculators_config`` naming the proposal method (greedy, K tokens) and the verifier (target).
It goes to its own folder, written atomically like every drafter export.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from ..drafter import Eagle3Drafter, save_drafter


def speculators_config_dict(drafter: Eagle3Drafter, verifier_name: str, verifier_architectures: list[str],
                            k: int) -> dict:
    c = drafter.cfg
    algorithm = "peagle" if c.parallel_drafting else "eagle3"
    out = {
        "architectures": ["PEagleSpeculator" if c.parallel_drafting else "Eagle3Speculator"],
        "speculators_model_type": algorithm,
        "transformer_layer_config": {
            "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": c.hidden_size,
            "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads,
            "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim, "intermediate_size": c.intermediate_size,
            "hidden_act": "silu", "rms_norm_eps": c.rms_norm_eps, "max_position_embeddings": c.max_position_embeddings,
            "rope_parameters": {"rope_theta": c.rope_theta, "rope_type": "default"}, "vocab_size": c.vocab_size,
            "attention_bias": c.attention_bias, "tie_word_embeddings": False,
        },
        "draft_vocab_size": c.draft_vocab_size,
        "target_hidden_size": c.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(c.aux_layer_ids),
        "norm_before_residual": False,
        "embed_requires_grad": c.has_embed_tokens,
        "speculators_config": {
            "algorithm": algorithm,
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": int(k)}],
            "verifier": {"name_or_path": verifier_name, "architectures": list(verifier_architectures)},
        },
    }
    if c.parallel_drafting:
        out["mask_token_id"] = int(c.mask_token_id)
    return out


def export_speculators(drafter: Eagle3Drafter, path: str | os.PathLike, *, verifier_name: str,
                       verifier_architectures: list[str], k: int | None = None,
                       dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write ``path`` in the speculators format (K defaults to the trained depth, else 3)."""
    k = k or drafter.cfg.trained_depth or 3
    config = speculators_config_dict(drafter, verifier_name, verifier_architectures, k)
    return save_drafter(drafter, Path(path), dtype=dtype, config=config)
