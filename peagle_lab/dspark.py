"""The DSpark drafter ``M_q``: a block drafted in one pass, then a sequential low-rank Markov head.

Layout: vLLM's ``Qwen3DSparkModel`` (``method: "dspark"``), which loads :func:`save_dspark`'s folders
unchanged. ``H`` = drafter hidden size (the target's), ``Vd`` = draft vocabulary, ``r`` = Markov rank::

    context (features known up to position P-1, one row each; computed once, cached):
        c = hidden_norm(fc(aux))                  (T, 3H) -> (T, H)
        per layer: K = rope(k_norm(k_proj(c))), V = v_proj(c)
    block (K slots at positions P .. P+K-1):
        ids = [x_P, mask, ..., mask]              x_P: the target's newest token, not yet seen by it
        x = embed(ids); Qwen3 layers (q_norm/k_norm) attend to [context K/V, block K/V]
        base_i = lm_head(norm(x_i))               (K, Vd): what slot i says about x_{P+1+i}
    Markov head, left to right (the only sequential part):
        logits_i = base_i + markov_w2 @ markov_w1[prev]      prev = x_P, then draft i-1
        draft_i = argmax (or a sample of) logits_i, mapped to a target id through d2t

Every block slot except the first gets the same mask token, so on its own the backbone can only hedge
between the continuations a position could have ("multi-modal collision"); the Markov head is one
small matmul per slot that tells slot i which token slot i-1 actually chose.

Attention inside the block is causal here (``dflash_config.causal``, which vLLM honours): slot i sees
the context and slots <= i, so a drafter trained with blocks of 8 drafts the same first K tokens for
any K <= 8, and vLLM serves it with its ordinary causal attention.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from .atomic import DRAFTER_NOTE, atomic_dir
from .compat import place_loaded
from .drafter import (MLP, DrafterCache, DraftVocab, RMSNorm, _rope_theta, apply_rotary, default_mask_token_id,
                      grouped_attention, llama_init_, rotary)

ARCHITECTURE = "Qwen3DSparkModel"


@dataclass
class DSparkConfig:
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int                      # target vocabulary (V); markov_w1 has one row per target id
    draft_vocab_size: int                # Vd
    target_hidden_size: int
    aux_layer_ids: tuple[int, ...]       # target layers whose INPUT hidden states are tapped (HF hidden_states[i])
    mask_token_id: int
    num_layers: int = 2
    markov_rank: int = 32
    block_size: int = 8                  # slots per block in training: drafts K <= block_size
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8192

    # what the engines and checks ask of every drafter config
    parallel_drafting = True
    has_embed_tokens = False             # the block's token embedding is the target's (frozen, shared)

    @property
    def trained_depth(self) -> int:
        return self.block_size

    @classmethod
    def for_target(cls, target, *, num_layers: int = 2, draft_vocab_size: int | None = None,
                   intermediate_size: int | None = None, markov_rank: int = 32, block_size: int = 8,
                   mask_token_id: int | None = None) -> "DSparkConfig":
        c = target.config
        heads = int(c.num_attention_heads)
        mask = default_mask_token_id(target) if mask_token_id is None else int(mask_token_id)
        return cls(hidden_size=target.hidden_size, num_heads=heads,
                   num_kv_heads=int(getattr(c, "num_key_value_heads", heads) or heads),
                   head_dim=int(getattr(c, "head_dim", None) or target.hidden_size // heads),
                   intermediate_size=int(intermediate_size or c.intermediate_size),
                   vocab_size=target.vocab_size, draft_vocab_size=int(draft_vocab_size or target.vocab_size),
                   target_hidden_size=target.hidden_size, aux_layer_ids=tuple(target.aux_layer_ids),
                   mask_token_id=mask, num_layers=num_layers, markov_rank=markov_rank, block_size=block_size,
                   rms_norm_eps=float(getattr(c, "rms_norm_eps", 1e-5)), rope_theta=float(_rope_theta(c)),
                   max_position_embeddings=int(getattr(c, "max_position_embeddings", 8192)))


class BlockAttention(nn.Module):
    """Qwen3 attention (per-head RMSNorm on q and k) over [context K/V, the block's own K/V]."""

    def __init__(self, cfg: DSparkConfig):
        super().__init__()
        self.cfg = cfg
        H, nh, nkv, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(H, nh * hd, bias=False)
        self.k_proj = nn.Linear(H, nkv * hd, bias=False)
        self.v_proj = nn.Linear(H, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, H, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def kv(self, x: torch.Tensor, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, H) -> K, V (B, nkv, T, hd), K normed and rotated."""
        B, T, _ = x.shape
        c = self.cfg
        k = self.k_norm(self.k_proj(x).view(B, T, c.num_kv_heads, c.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.num_kv_heads, c.head_dim).transpose(1, 2)
        return apply_rotary(k, cos, sin), v

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask):
        B, T, _ = x.shape
        c = self.cfg
        q = self.q_norm(self.q_proj(x).view(B, T, c.num_heads, c.head_dim)).transpose(1, 2)   # (B, nh, T, hd)
        q = apply_rotary(q, cos, sin)
        k, v = self.kv(x, cos, sin)
        k, v = torch.cat([ctx_k.to(k.dtype), k], 2), torch.cat([ctx_v.to(v.dtype), v], 2)    # (B, nkv, S+T, hd)
        out = grouped_attention(q, k, v, mask)                                               # (B, nh, T, hd)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, c.num_heads * c.head_dim))


class BlockLayer(nn.Module):
    def __init__(self, cfg: DSparkConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = BlockAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx_k, ctx_v, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class MarkovHead(nn.Module):
    """The transition bias: the previous token's r-dim row of ``markov_w1``, projected by ``markov_w2``."""

    def __init__(self, cfg: DSparkConfig):
        super().__init__()
        self.markov_w1 = nn.Embedding(cfg.vocab_size, cfg.markov_rank)                       # (V, r), target ids
        self.markov_w2 = nn.Linear(cfg.markov_rank, cfg.draft_vocab_size, bias=False)        # (Vd, r)

    def forward(self, prev_ids: torch.Tensor) -> torch.Tensor:
        return self.markov_w2(self.markov_w1(prev_ids))                                      # (..., Vd)


class DSparkDrafter(DraftVocab, nn.Module):
    def __init__(self, cfg: DSparkConfig):
        super().__init__()
        self.cfg = cfg
        H = cfg.hidden_size
        self.fc = nn.Linear(len(cfg.aux_layer_ids) * cfg.target_hidden_size, H, bias=False)
        self.hidden_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.layers = nn.ModuleList(BlockLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False)
        self.markov_head = MarkovHead(cfg)
        d2t = torch.zeros(cfg.draft_vocab_size, dtype=torch.long)
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        t2d[: cfg.draft_vocab_size] = True
        self.register_buffer("d2t", d2t)
        self.register_buffer("t2d", t2d)
        self._shared_embed: torch.Tensor | None = None

    # ----------------------------------------------------------------------------- set-up
    def share_target_weights(self, target) -> None:
        """The block's token embedding is the target's (frozen, not saved; vLLM shares it the same way)."""
        object.__setattr__(self, "_shared_embed", target.model.get_input_embeddings().weight.detach())

    def new_cache(self) -> DrafterCache:
        """The context's K/V per layer; it only grows by verified positions (block slots are never stored)."""
        return DrafterCache(self.cfg.num_layers)

    # ----------------------------------------------------------------------------- forward
    def context_kv(self, aux: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Target features ``aux (B, T, 3H)`` at ``positions (B, T)`` -> each layer's context ``(K, V)``."""
        c = self.hidden_norm(self.fc(aux.to(self.fc.weight.dtype)))                         # (B, T, H)
        cos, sin = rotary(positions, self.cfg.head_dim, self.cfg.rope_theta)
        return [layer.self_attn.kv(c, cos, sin) for layer in self.layers]

    def block(self, ids: torch.Tensor, positions: torch.Tensor, ctx_kv, mask: torch.Tensor | None) -> torch.Tensor:
        """Block slots ``ids (B, Q)`` at ``positions (B, Q)`` over ``ctx_kv`` -> final-normed states (B, Q, H).

        ``mask (B, 1, Q, S+Q)`` says which context and block keys each slot sees (None: all of them)."""
        if self._shared_embed is None:
            raise RuntimeError("call share_target_weights(target) first: the block embeds tokens with the "
                               "target's table")
        x = F.embedding(ids, self._shared_embed).to(self.fc.weight.dtype)                  # (B, Q, H)
        cos, sin = rotary(positions, self.cfg.head_dim, self.cfg.rope_theta)
        for layer, (k, v) in zip(self.layers, ctx_kv):
            x = layer(x, cos, sin, k, v, mask)
        return self.norm(x)

    def logits(self, normed: torch.Tensor, prev_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocab logits of block slots whose previous token is ``prev_ids`` (target ids)."""
        return self.lm_head(normed) + self.markov_head(prev_ids).to(normed.dtype)


def init_dspark(cfg: DSparkConfig, target=None, seed: int = 0) -> DSparkDrafter:
    """A fresh DSpark drafter (normal(0, 0.02) weights, unit norms). ``markov_w2`` starts at zero, so the
    untrained Markov head adds nothing and training starts from the plain parallel backbone."""
    drafter = DSparkDrafter(cfg)
    llama_init_(drafter, seed)
    with torch.no_grad():
        drafter.markov_head.markov_w2.weight.zero_()
    if target is not None:
        drafter.share_target_weights(target)
    return drafter


# ----------------------------------------------------------------------------- checkpoints (vLLM's layout)
def vllm_config_dict(cfg: DSparkConfig, dtype: str = "bfloat16") -> dict:
    """config.json that vLLM's ``Qwen3DSparkModel`` reads (``--speculative-config '{"method": "dspark", ...}'``).

    The taps are given as ``eagle_aux_hidden_state_layer_ids`` (input of layer i, vLLM uses them as they are);
    ``dflash_config.target_layer_ids`` says the same in DFlash's "output of layer i" convention."""
    return {
        "architectures": [ARCHITECTURE], "model_type": "qwen3",
        "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size, "hidden_act": "silu", "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta, "rope_parameters": {"rope_theta": cfg.rope_theta, "rope_type": "default"},
        "max_position_embeddings": cfg.max_position_embeddings, "attention_bias": False,
        "tie_word_embeddings": False, "vocab_size": cfg.vocab_size, "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(cfg.aux_layer_ids),
        "markov_rank": cfg.markov_rank, "block_size": cfg.block_size, "mask_token_id": cfg.mask_token_id,
        "sample_from_anchor": True,
        "dflash_config": {"mask_token_id": cfg.mask_token_id, "causal": True,
                          "target_layer_ids": [i - 1 for i in cfg.aux_layer_ids]},
        "torch_dtype": dtype,
    }


def config_from_dict(raw: dict) -> DSparkConfig:
    """A DSparkConfig from our config.json (the keys :func:`vllm_config_dict` writes), naming a missing key."""
    if ARCHITECTURE not in (raw.get("architectures") or []):
        raise ValueError(f"not a DSpark drafter config (architectures {raw.get('architectures')}, "
                         f"expected {ARCHITECTURE!r})")
    need = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "vocab_size", "draft_vocab_size", "markov_rank", "mask_token_id",
            "eagle_aux_hidden_state_layer_ids")
    missing = [k for k in need if k not in raw]
    if missing:
        raise ValueError(f"DSpark config.json lacks {', '.join(missing)}; re-export the drafter")
    rope = raw.get("rope_parameters") or {}
    return DSparkConfig(
        hidden_size=int(raw["hidden_size"]), num_heads=int(raw["num_attention_heads"]),
        num_kv_heads=int(raw["num_key_value_heads"]), head_dim=int(raw["head_dim"]),
        intermediate_size=int(raw["intermediate_size"]), vocab_size=int(raw["vocab_size"]),
        draft_vocab_size=int(raw["draft_vocab_size"]),
        target_hidden_size=int(raw.get("target_hidden_size") or raw["hidden_size"]),
        aux_layer_ids=tuple(int(i) for i in raw["eagle_aux_hidden_state_layer_ids"]),
        mask_token_id=int(raw["mask_token_id"]), num_layers=int(raw["num_hidden_layers"]),
        markov_rank=int(raw["markov_rank"]), block_size=int(raw.get("block_size", 8)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))),
        max_position_embeddings=int(raw.get("max_position_embeddings", 8192)))


def is_dspark_dir(path: str | os.PathLike) -> bool:
    p = Path(path) / "config.json"
    try:
        return ARCHITECTURE in (json.loads(p.read_text()).get("architectures") or [])
    except (OSError, ValueError):
        return False


def save_dspark(drafter: DSparkDrafter, path: str | os.PathLike, dtype: torch.dtype = torch.bfloat16,
                extra_files: dict[str, str] | None = None, *, overwrite: bool = False,
                flag: str = "overwrite=True") -> Path:
    """Write the folder vLLM loads (config.json + model.safetensors, + ``extra_files``), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {name: (value.contiguous() if name in ("d2t", "t2d") else value.detach().to(dtype).contiguous())
               for name, value in drafter.state_dict().items()}
    with atomic_dir(path, overwrite=overwrite, flag=flag, note=DRAFTER_NOTE) as tmp:
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = vllm_config_dict(drafter.cfg, str(dtype).removeprefix("torch."))
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
    return path


def load_dspark(path: str | os.PathLike, target=None, dtype: torch.dtype = torch.float32) -> DSparkDrafter:
    """Load a DSpark folder; with ``target`` its fit is checked and the embedding shared."""
    path = Path(path)
    cfg = config_from_dict(json.loads((path / "config.json").read_text()))
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path} has no .safetensors weights")
    state = {}
    for f in files:
        state.update({k.removeprefix("model."): v for k, v in load_file(str(f)).items()})
    drafter = DSparkDrafter(cfg)
    own = drafter.state_dict()
    if "t2d" not in state and "d2t" in state:
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        t2d[torch.arange(cfg.draft_vocab_size) + state["d2t"]] = True
        state["t2d"] = t2d
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        raise ValueError(f"{path}: weights do not match a DSpark drafter of this config "
                         f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
    bad = [k for k in own if tuple(state[k].shape) != tuple(own[k].shape)]
    if bad:
        raise ValueError(f"{path}: {bad[0]} has shape {tuple(state[bad[0]].shape)}, config.json implies "
                         f"{tuple(own[bad[0]].shape)}; the config and weights come from different drafters")
    return place_loaded(drafter, state, dtype, target)
