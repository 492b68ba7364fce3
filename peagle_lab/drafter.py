"""The EAGLE-3 drafter ``M_q``, in the layout vLLM's ``LlamaForCausalLMEagle3`` loads
(:mod:`peagle_lab.checkpoint` writes and reads its folders).

Anatomy (``H`` = drafter hidden size, equal to the target's; ``Vd`` = draft vocabulary)::

    aux (T, 3H) --fc--> h (T, H)          target features from 3 layers, projected
    ids (T,)   --embed--> e (T, H)
    layer 0:  x = cat(input_layernorm(e), hidden_norm(h))     (T, 2H) -> q/k/v
              residual = h
    layers 1..: plain pre-norm Llama layers on (hidden, residual)
    prenorm = hidden + residual           (T, H)  fed back as h in sequential drafting
    logits  = lm_head(norm(prenorm))      (T, Vd) draft vocab; target id = i + d2t[i]

P-EAGLE (parallel drafting) adds ``mask_hidden`` (3H values, projected by ``fc`` like real
features) and a mask token id (``ptd_token_id`` in config.json): the K-1 not-yet-known future
slots get both, so one forward pass yields K drafts.

The drafter keeps its own KV cache (:class:`DrafterCache`), rolled back after verification
just like the target's.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class DrafterConfig:
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int                      # target vocabulary (V)
    draft_vocab_size: int                # Vd <= V
    target_hidden_size: int
    aux_layer_ids: tuple[int, ...]
    num_layers: int = 1
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8192
    attention_bias: bool = False
    parallel_drafting: bool = False
    mask_token_id: int | None = None     # P-EAGLE's mask token (ptd_token_id)
    trained_depth: int | None = None     # largest K a P-EAGLE drafter was trained for
    has_embed_tokens: bool = True        # False: share the target's input embedding
    has_lm_head: bool = True             # False: share the target's output layer (needs Vd == V; vLLM shares it too)
    learned_mask_embedding: bool = False  # P-EAGLE: the mask token's embedding row is a parameter of its own

    @classmethod
    def for_target(cls, target, *, num_layers: int = 1, draft_vocab_size: int | None = None,
                   parallel_drafting: bool = False, mask_token_id: int | None = None,
                   trained_depth: int | None = None, intermediate_size: int | None = None,
                   has_embed_tokens: bool = True, has_lm_head: bool = True,
                   learned_mask_embedding: bool = False) -> "DrafterConfig":
        """A drafter shaped for ``target`` (a :class:`peagle_lab.target.Target`)."""
        c = target.config
        heads = int(c.num_attention_heads)
        if parallel_drafting and mask_token_id is None:
            mask_token_id = default_mask_token_id(target)
        if mask_token_id is not None and not 0 <= int(mask_token_id) < target.vocab_size:
            raise ValueError(f"mask token id {mask_token_id} is outside the target's vocabulary of {target.vocab_size} "
                             "ids; pick one below it (--set mask_token_id=ID; unset, an unused id is chosen)")
        return cls(
            hidden_size=target.hidden_size, num_heads=heads,
            num_kv_heads=int(getattr(c, "num_key_value_heads", heads) or heads),
            head_dim=int(getattr(c, "head_dim", None) or target.hidden_size // heads),
            intermediate_size=int(intermediate_size or c.intermediate_size),
            vocab_size=target.vocab_size, draft_vocab_size=int(draft_vocab_size or target.vocab_size),
            target_hidden_size=target.hidden_size, aux_layer_ids=tuple(target.aux_layer_ids),
            num_layers=num_layers, rms_norm_eps=float(getattr(c, "rms_norm_eps", 1e-5)),
            rope_theta=float(_rope_theta(c)),
            max_position_embeddings=int(getattr(c, "max_position_embeddings", 8192)),
            parallel_drafting=parallel_drafting, mask_token_id=mask_token_id,
            trained_depth=trained_depth, has_embed_tokens=has_embed_tokens, has_lm_head=has_lm_head,
            learned_mask_embedding=learned_mask_embedding and parallel_drafting)


def _rope_theta(config) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    return params.get("rope_theta", getattr(config, "rope_theta", 10000.0))


def default_mask_token_id(target) -> int:
    """P-EAGLE's mask token: an id that real text never produces (:func:`unused_token_id`).

    Id 0 (SmolLM2's ``<|endoftext|>``, also its unk/pad token) is a poor choice: real contexts contain it, and its
    frozen embedding means "end of document" to every layer. The mask slot's embedding is learned in training.
    Without a tokenizer (tests' tiny models) the last id."""
    if target.tokenizer is None:
        return target.vocab_size - 1
    return unused_token_id(target.tokenizer, reserved=target.eos_token_ids)


def unused_token_id(tokenizer, reserved: tuple[int, ...] = ()) -> int:
    """An id no text the tokenizer encodes comes out as, for P-EAGLE's mask slots.

    First choice (as the public P-EAGLE trainers do): the first embedding row past the tokenizer's
    length, when the model has spare rows. SmolLM2 has none (49,152 rows, 49,152 tokens), so the
    fallback is the highest-numbered *added special* token that is not a chat/BOS/EOS/pad/unk token:
    special tokens are produced only when their literal text is typed, never by merging ordinary
    text, and the chat template does not use them. For SmolLM2 that is 16, ``<empty_output>``, a
    Jupyter-notebook marker from its pre-training data.
    """
    size = len(tokenizer)
    vocab = getattr(tokenizer, "vocab_size", size)
    if vocab > size:
        return size
    busy = set(reserved)
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            busy.add(value)
    template = str(getattr(tokenizer, "chat_template", "") or "")
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    candidates = [i for i, tok in added.items()
                  if getattr(tok, "special", False) and i not in busy and str(tok) not in template]
    if not candidates:
        raise ValueError("the tokenizer has no spare row and no unused special token for P-EAGLE's mask slots; "
                         "pass mask_token_id= explicitly (an id your data never contains)")
    return max(candidates)


# ----------------------------------------------------------------------------- building blocks
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, torch.float32))              # fp32 for bf16, fp64 stays fp64
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotary(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables (B, T, head_dim) for the Llama (rotate-half) RoPE."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    angles = positions.float()[..., None] * inv_freq                     # (B, T, hd/2)
    angles = torch.cat([angles, angles], dim=-1)                          # (B, T, hd)
    return angles.cos(), angles.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x (B, heads, T, hd); cos/sin (B, T, hd)
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
    return x * cos + _rotate_half(x) * sin


class DrafterCache:
    """Per-layer K/V tensors ``(B, kv_heads, T, head_dim)``; ``crop`` rolls back rejected slots."""

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def crop(self, length: int) -> None:
        if length > self.length:
            raise ValueError(f"cannot crop a drafter cache of {self.length} positions to {length}")
        for i in range(len(self.keys)):
            if self.keys[i] is not None:
                self.keys[i] = self.keys[i][:, :, :length]
                self.values[i] = self.values[i][:, :, :length]


def _is_block_mask(mask) -> bool:
    return type(mask).__name__ == "BlockMask"


_FLEX = {}


def _flex_attention(q, k, v, block_mask):
    """flex attention with a BlockMask: compiled on CUDA (fused, sparse), eager elsewhere."""
    from torch.nn.attention.flex_attention import flex_attention

    if q.device.type != "cuda":
        return flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)
    if "cuda" not in _FLEX:
        _FLEX["cuda"] = torch.compile(flex_attention, dynamic=True)
    try:
        return _FLEX["cuda"](q, k, v, block_mask=block_mask, enable_gqa=True)
    except Exception as e:  # noqa: BLE001 -- Inductor's errors have no stable public class
        if _FLEX.get("static") or "NoValidChoices" not in repr(e):
            raise
        # Seen on an H200 (torch 2.11, float32, head_dim 16): the dynamic-shape flex template had no valid
        # configuration. Compile per shape instead (slower to start, same numbers).
        warnings.warn("flex attention: no dynamic-shape kernel for these inputs; compiling per shape instead")
        _FLEX["cuda"] = _FLEX["static"] = torch.compile(flex_attention, dynamic=False)
        return _FLEX["cuda"](q, k, v, block_mask=block_mask, enable_gqa=True)


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask) -> torch.Tensor:
    """SDPA with grouped K/V heads: q (B, nh, T, hd), k/v (B, nkv, S, hd), each K/V head shared by nh/nkv query
    heads -> (B, nh, T, hd)."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig, in_dim: int):
        super().__init__()
        self.cfg = cfg
        self.q_proj = nn.Linear(in_dim, cfg.num_heads * cfg.head_dim, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(in_dim, cfg.num_kv_heads * cfg.head_dim, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(in_dim, cfg.num_kv_heads * cfg.head_dim, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, cache: DrafterCache | None, layer: int, attn_mask: torch.Tensor | None):
        B, T, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(B, T, c.num_heads, c.head_dim).transpose(1, 2)      # (B, nh, T, hd)
        k = self.k_proj(x).view(B, T, c.num_kv_heads, c.head_dim).transpose(1, 2)   # (B, nkv, T, hd)
        v = self.v_proj(x).view(B, T, c.num_kv_heads, c.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.append(layer, k, v)                                        # (B, nkv, S, hd)
        attend = getattr(cache, "attend", None)           # a cache may bring its own kernel (the fast engine's)
        if _is_block_mask(attn_mask):                       # training: sparse P-EAGLE mask, no dense (T, S)
            out = _flex_attention(q.to(v.dtype), k.to(v.dtype), v, attn_mask)
        elif attend is not None:
            out = attend(q, k, v)                                                   # (B, nh, T, hd)
        else:
            out = grouped_attention(q, k, v, attn_mask)                             # (B, nh, T, hd)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, c.num_heads * c.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Llama layer; layer 0 reads ``cat(embed, hidden)`` (2H) as EAGLE-3 does."""

    def __init__(self, cfg: DrafterConfig, index: int):
        super().__init__()
        self.index = index
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if index == 0:
            self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, 2 * cfg.hidden_size if index == 0 else cfg.hidden_size)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, hidden, residual, embeds, cos, sin, cache, attn_mask):
        if self.index == 0:
            residual = hidden
            x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)  # (B, T, 2H)
        else:
            residual = hidden + residual
            x = self.input_layernorm(residual)
        residual = self.self_attn(x, cos, sin, cache, self.index, attn_mask) + residual
        hidden = self.mlp(self.post_attention_layernorm(residual))
        return hidden, residual


class DraftVocab:
    """The draft vocabulary both drafter kinds share: ``d2t`` (draft index i -> target id ``i + d2t[i]``, vLLM's
    offsets) and ``t2d`` (a mask over the target vocabulary), buffers of the drafter that mixes this in."""

    def set_draft_vocab(self, target_ids: torch.Tensor) -> None:
        """Map draft index i -> target id ``target_ids[i]`` (sorted ascending), as d2t/t2d."""
        target_ids = torch.as_tensor(target_ids, dtype=torch.long).sort().values
        if target_ids.numel() != self.cfg.draft_vocab_size:
            raise ValueError(f"draft vocab needs {self.cfg.draft_vocab_size} ids, got {target_ids.numel()}")
        self.d2t.copy_(target_ids - torch.arange(target_ids.numel()))
        self.t2d.zero_()
        self.t2d[target_ids] = True

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def full_vocab(self, draft_values: torch.Tensor, fill: float) -> torch.Tensor:
        """Scatter (..., Vd) values into (..., V), ``fill`` elsewhere (vLLM uses -inf for logits)."""
        out = draft_values.new_full((*draft_values.shape[:-1], self.cfg.vocab_size), fill)
        out[..., self.to_target_ids(torch.arange(self.cfg.draft_vocab_size, device=draft_values.device))] = draft_values
        return out


class Eagle3Drafter(DraftVocab, nn.Module):
    """EAGLE-3 / P-EAGLE drafter. See the module docstring for the data flow."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        H = cfg.hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H) if cfg.has_embed_tokens else None
        self._shared_embed: torch.Tensor | None = None
        self.fc = nn.Linear(len(cfg.aux_layer_ids) * cfg.target_hidden_size, H, bias=False)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        if not cfg.has_lm_head and cfg.draft_vocab_size != cfg.vocab_size:
            raise ValueError(f"a drafter sharing the target's lm_head drafts over the whole vocabulary: set "
                             f"draft_vocab_size={cfg.vocab_size} (got {cfg.draft_vocab_size})")
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False) if cfg.has_lm_head else None
        self._shared_head: torch.Tensor | None = None
        d2t = torch.zeros(cfg.draft_vocab_size, dtype=torch.long)
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        t2d[: cfg.draft_vocab_size] = True
        self.register_buffer("d2t", d2t)
        self.register_buffer("t2d", t2d)
        fc_in = len(cfg.aux_layer_ids) * cfg.target_hidden_size
        self.mask_hidden = nn.Parameter(torch.zeros(1, fc_in)) if cfg.parallel_drafting else None
        # The mask slots' token embedding, learned (the paper's Table 5: frozen costs acceptance). Stored as one
        # row; materialise_for_vllm() writes it into a full embed_tokens for vLLM.
        learned = cfg.parallel_drafting and cfg.learned_mask_embedding
        self.mask_embedding = nn.Parameter(torch.zeros(1, H)) if learned else None

    # ----------------------------------------------------------------------------- set-up
    def share_embedding(self, weight: torch.Tensor) -> None:
        """Use the target's input embedding (for checkpoints without ``embed_tokens``).

        Stored as a plain (detached) tensor: it stays frozen and out of the drafter's state dict.
        """
        object.__setattr__(self, "_shared_embed", weight.detach())

    def share_head(self, weight: torch.Tensor) -> None:
        """Use the target's output layer ``(V, H)`` (for drafters without ``lm_head``): frozen, not saved."""
        object.__setattr__(self, "_shared_head", weight.detach())

    def share_target_weights(self, target) -> None:
        """Attach what this drafter borrows from ``target``: the input embedding and/or the output layer."""
        if self.embed_tokens is None:
            self.share_embedding(target.model.get_input_embeddings().weight)
        if self.lm_head is None:
            self.share_head(target.model.get_output_embeddings().weight)

    def head_weight(self) -> torch.Tensor:
        """The output layer's ``(Vd, H)`` weight: its own ``lm_head`` (trainable) or the target's (frozen)."""
        if self.lm_head is not None:
            return self.lm_head.weight
        if self._shared_head is None:
            raise RuntimeError("this drafter has no lm_head: call share_head(target output layer) first")
        return self._shared_head

    def head(self, normed: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary from the final-normed hidden state."""
        if self.lm_head is not None:
            return self.lm_head(normed)
        return F.linear(normed, self.head_weight().to(normed.dtype))

    def new_cache(self) -> DrafterCache:
        return DrafterCache(self.cfg.num_layers)

    # ----------------------------------------------------------------------------- forward
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.embed_tokens is not None:
            e = self.embed_tokens(input_ids)
        elif self._shared_embed is None:
            raise RuntimeError("this drafter has no embed_tokens: call share_embedding(target embedding) first")
        else:
            e = F.embedding(input_ids, self._shared_embed)
        if self.mask_embedding is not None:                                 # the mask row is the drafter's own
            is_mask = (input_ids == self.cfg.mask_token_id)[..., None]
            e = torch.where(is_mask, self.mask_embedding.to(e.dtype), e)
        return e

    def project(self, aux: torch.Tensor) -> torch.Tensor:
        """Target features (..., 3H) -> drafter hidden (..., H)."""
        return self.fc(aux.to(self.fc.weight.dtype))

    def projected_mask_hidden(self) -> torch.Tensor:
        if self.mask_hidden is None:
            raise RuntimeError("this drafter was not built for parallel drafting (no mask_hidden)")
        return self.fc(self.mask_hidden)                                    # (1, H)

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, cache: DrafterCache | None = None,
                positions: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None,
                logits: bool = True):
        """``input_ids (B, T)``, ``hidden (B, T, H)`` -> ``(prenorm (B, T, H), logits (B, T, Vd))``.

        ``logits=False`` returns the final-normed hidden ``(B, T, H)`` instead of the logits (training
        applies the head chunk by chunk inside its loss, never holding all ``(B, T, Vd)`` at once).

        Without ``attn_mask`` the new slots attend causally to themselves and to everything in
        ``cache``; positions default to consecutive ones after the cache.
        """
        B, T = input_ids.shape
        start = cache.length if cache is not None else 0
        if positions is None:
            positions = torch.arange(start, start + T, device=input_ids.device).expand(B, T)
        if attn_mask is None and T > 1:
            q_pos = torch.arange(start, start + T, device=input_ids.device)[:, None]
            attn_mask = torch.arange(start + T, device=input_ids.device)[None, :] <= q_pos  # (T, S)
        cos, sin = rotary(positions, self.cfg.head_dim, self.cfg.rope_theta)
        embeds = self.embed(input_ids).to(hidden.dtype)
        residual = None
        for layer in self.layers:
            hidden, residual = layer(hidden, residual, embeds, cos, sin, cache, attn_mask)
        prenorm = hidden + residual
        normed = self.norm(prenorm)
        return prenorm, (self.head(normed) if logits else normed)


@torch.no_grad()
def llama_init_(module: nn.Module, seed: int) -> None:
    """Llama-style init in place: norms 1, every other parameter normal(0, 0.02) from one generator, in parameter
    order (so a seed gives the same drafter everywhere)."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        if name.endswith("norm.weight") or "layernorm" in name:
            p.fill_(1.0)
        else:                                   # mask_hidden too
            p.normal_(0.0, 0.02, generator=gen)


def init_drafter(cfg: DrafterConfig, target=None, seed: int = 0) -> Eagle3Drafter:
    """A freshly initialised drafter (Llama-style init); embeddings copied from ``target``."""
    drafter = Eagle3Drafter(cfg)
    llama_init_(drafter, seed)
    with torch.no_grad():
        if target is not None:
            embedding = target.model.get_input_embeddings().weight
            if drafter.embed_tokens is not None:
                drafter.embed_tokens.weight.copy_(embedding)
            if drafter.mask_embedding is not None:                          # start from the row it replaces
                drafter.mask_embedding.copy_(embedding[cfg.mask_token_id][None].to(drafter.mask_embedding))
            drafter.share_target_weights(target)
    return drafter

