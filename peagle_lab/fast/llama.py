"""The target's Llama forward written out by hand, over a static (preallocated) KV cache.

Why write it again when transformers has one? Speed on a GPU comes from replaying a captured CUDA
graph, and a graph needs every step to have fixed shapes and fixed buffers: the KV cache is
allocated once for ``max_len`` positions, and each step writes its keys/values at its positions
and attends over the *whole* cache through a mask (``slot <= position``). Rolling back rejected
drafts is then nothing but a smaller length counter: stale slots sit beyond every later query's
position (masked) until new tokens overwrite them.

The weights are the loaded transformers model's own tensors (nothing is copied); RoPE tables come
from the model's rotary embedding, so rope scaling variants carry over. The oracle
(``tests/test_fast_engine.py``) checks logits against transformers' and the taps against
:meth:`peagle_lab.target.Target.forward`.

Shapes: ``L`` layers, ``H`` hidden, ``nh`` query heads, ``nkv`` key/value heads (``rep = nh / nkv``),
``hd`` head dim, ``S`` = ``max_len`` cache slots, ``T`` tokens in this step, ``V`` vocabulary.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..drafter import apply_rotary
from ..target import Target


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm; statistics in float32 (float64 stays float64), as transformers does for bf16."""
    dtype = x.dtype
    x = x.to(torch.promote_types(dtype, torch.float32))
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


class StaticTarget:
    """``forward(ids (T,), positions (T,))`` -> ``(logits (T, V) float32, aux (T, 3H))``, cache updated.

    Batch 1. ``positions`` is a device tensor, so the same call runs eagerly (prefill, any ``T``)
    or inside a captured graph (decode ``T = 1``, verify ``T = K + 1``) without a host sync.
    """

    def __init__(self, target: Target, max_len: int):
        cfg = target.config
        if getattr(cfg, "hidden_act", "silu") != "silu":
            raise ValueError(f"the fast engine's Llama forward uses SiLU; this target's hidden_act is {cfg.hidden_act!r} "
                             "(use the teaching engine: engine='teaching')")
        decoder = target.model.get_decoder()
        self.layers = decoder.layers
        self.embed = decoder.embed_tokens.weight                           # (V, H)
        self.final_norm = decoder.norm
        self.head = target.model.get_output_embeddings().weight            # (V, H), may be the embedding (tied)
        self.eps = float(cfg.rms_norm_eps)
        self.nh = int(cfg.num_attention_heads)
        self.nkv = int(getattr(cfg, "num_key_value_heads", None) or self.nh)
        self.hd = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh)
        self.rep = self.nh // self.nkv
        self.aux_layer_ids = tuple(target.aux_layer_ids)
        self.max_len = int(max_len)
        dtype, device = self.embed.dtype, self.embed.device
        L = len(self.layers)
        self.keys = torch.zeros(L, self.nkv, self.max_len, self.hd, dtype=dtype, device=device)     # (L, nkv, S, hd)
        self.values = torch.zeros_like(self.keys)
        self.slots = torch.arange(self.max_len, device=device)                                    # (S,)
        with torch.no_grad():                                               # the model's own RoPE, every position
            cos, sin = decoder.rotary_emb(self.keys[:1, :1, :1], self.slots[None])                # (1, S, hd)
        self.cos, self.sin = cos[0], sin[0]                                                       # (S, hd)

    @property
    def weight_bytes(self) -> int:
        """Bytes of weight one forward streams: every layer, the final norm and the output layer (the
        input embedding is looked up a row at a time; tied to the output layer it counts once)."""
        seen, total = set(), 0
        for t in [self.head, self.final_norm.weight, *(p for layer in self.layers for p in layer.parameters())]:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
        return total

    def _attention(self, i: int, attn, x: torch.Tensor, cos, sin, positions, mask) -> torch.Tensor:
        T = x.shape[1]
        q = F.linear(x, attn.q_proj.weight, attn.q_proj.bias).view(1, T, self.nh, self.hd).transpose(1, 2)   # (1, nh, T, hd)
        k = F.linear(x, attn.k_proj.weight, attn.k_proj.bias).view(1, T, self.nkv, self.hd).transpose(1, 2)  # (1, nkv, T, hd)
        v = F.linear(x, attn.v_proj.weight, attn.v_proj.bias).view(1, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        self.keys[i].index_copy_(1, positions, k[0])                        # write this step's slots in place
        self.values[i].index_copy_(1, positions, v[0])
        # Grouped-query attention without repeating K/V: the rep query heads sharing a KV head become
        # rep*T query rows of that head (head h = g*rep + r -> row r*T + t of group g).
        q = q.reshape(1, self.nkv, self.rep * T, self.hd)                   # (1, nkv, rep*T, hd)
        out = F.scaled_dot_product_attention(q, self.keys[i][None], self.values[i][None], attn_mask=mask)
        out = out.reshape(1, self.nh, T, self.hd).transpose(1, 2).reshape(1, T, self.nh * self.hd)  # (1, T, nh*hd)
        return F.linear(out, attn.o_proj.weight, attn.o_proj.bias)

    @staticmethod
    def _mlp(mlp, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.silu(F.linear(x, mlp.gate_proj.weight)) * F.linear(x, mlp.up_proj.weight), mlp.down_proj.weight)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, aux: bool = True):
        """``ids (T,)`` at ``positions (T,)`` -> ``(logits (T, V) float32, aux (T, 3H) or None)``."""
        x = F.embedding(ids, self.embed)[None]                              # (1, T, H)
        cos, sin = self.cos[positions][None], self.sin[positions][None]     # (1, T, hd)
        mask = self.slots[None, :] <= positions[:, None]                    # (T, S): the whole cache, causal
        mask = mask.repeat(self.rep, 1)                                     # (rep*T, S) rows as in _attention
        taps = {}
        for i, layer in enumerate(self.layers):
            if aux and i in self.aux_layer_ids:
                taps[i] = x                                                 # EAGLE-3 taps: inputs of layers
            h = rms_norm(x, layer.input_layernorm.weight, self.eps)
            x = x + self._attention(i, layer.self_attn, h, cos, sin, positions, mask)
            x = x + self._mlp(layer.mlp, rms_norm(x, layer.post_attention_layernorm.weight, self.eps))
        logits = F.linear(rms_norm(x, self.final_norm.weight, self.eps), self.head).float()   # (1, T, V)
        feats = torch.cat([taps[i] for i in self.aux_layer_ids], dim=-1)[0] if aux else None  # (T, 3H)
        return logits[0], feats
