"""The target's Llama forward written out by hand, over a static (preallocated) KV cache.

Why write it again when transformers has one? Speed on a GPU comes from replaying a captured CUDA
graph, and a graph needs every step to have fixed shapes and fixed buffers: the KV cache is
allocated once for ``max_len`` positions, and each step writes its keys/values at its positions
and attends over the *whole* cache through a mask (``slot <= position``). Rolling back rejected
drafts is then nothing but a smaller length counter: stale slots sit beyond every later query's
position (masked) until new tokens overwrite them.

The weights are read from the loaded transformers model; q/k/v and gate/up projections are
concatenated once into one matrix each, and the attention mask is built once per step as an
additive float mask, because at batch 1 a step's time is its kernel count (a captured graph still
pays ~1-2 us a kernel): one matmul instead of three, one RoPE over q and k together, a fused
``F.rms_norm``. RoPE tables come from the model's rotary embedding, so rope scaling variants carry
over. The oracle
(``tests/test_fast_engine.py``) checks logits against transformers' and the taps against
:meth:`peagle_lab.target.Target.forward`.

Shapes: ``L`` layers, ``H`` hidden, ``nh`` query heads, ``nkv`` key/value heads (``rep = nh / nkv``),
``hd`` head dim, ``S`` = ``max_len`` cache slots, ``T`` tokens in this step, ``V`` vocabulary.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...kernels.cache_attention import attend_cache
from ...target import Target
from .graphs import tensor_bytes

ATTENTIONS = ("auto", "sdpa", "triton")


def check_attention(attention: str) -> str:
    """``attention`` as the fast engine takes it, or an error naming the choices."""
    if attention not in ATTENTIONS:
        raise ValueError(f"attention={attention!r}: choose 'auto' (triton on CUDA, sdpa elsewhere), 'sdpa' (torch's "
                         "scaled_dot_product_attention over the whole cache, masked) or 'triton' "
                         "(peagle_lab.kernels.cache_attention: split over the live slots)")
    return attention


def resolve_attention(attention: str, device: torch.device | str, head_dims: tuple[int, ...] = ()) -> str:
    """``"auto"`` -> ``"triton"`` on a CUDA GPU of compute capability >= 8.0 (Triton installed, every head
    dim a power of two >= 16), else
    ``"sdpa"``; an explicit choice comes back checked. On the H200 the Triton kernel made a compiled
    SmolLM2-135M decode step 1.2x faster than cuDNN's SDPA over the whole cache (benchmarks/RESULTS.md);
    on a CPU it would run in Triton's interpreter, so SDPA is the CPU's choice."""
    check_attention(attention)
    if attention != "auto":
        return attention
    from ...kernels.triton_kernel import triton
    device = torch.device(device)
    fits = all(hd >= 16 and not hd & (hd - 1) for hd in head_dims)
    # Triton supports GPUs from compute capability 8.0 (A100, L4, H100/H200); a T4 (7.5) keeps SDPA
    modern = device.type == "cuda" and torch.cuda.is_available() and torch.cuda.get_device_capability(device) >= (8, 0)
    return "triton" if modern and triton is not None and fits else "sdpa"


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm (one fused kernel on CUDA; bf16 statistics in float32 inside it)."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _cat_linear(*linears) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Stack nn.Linear layers that read the same input: one ``(sum out, in)`` weight (and bias)."""
    weight = torch.cat([m.weight.detach() for m in linears])
    biases = [m.bias for m in linears]
    bias = None if all(b is None for b in biases) else torch.cat(
        [b.detach() if b is not None else weight.new_zeros(m.out_features) for b, m in zip(biases, linears)])
    return weight, bias


class StaticTarget:
    """``forward(ids (T,), positions (T,))`` -> ``(logits (T, V) float32, aux (T, 3H))``, cache updated.

    Batch 1. ``positions`` is a device tensor, so the same call runs eagerly (prefill, any ``T``)
    or inside a captured graph (decode ``T = 1``, verify ``T = K + 1``) without a host sync.

    ``attention``: ``"auto"`` -- ``"triton"`` on CUDA, ``"sdpa"`` elsewhere (:func:`resolve_attention`);
    ``"sdpa"`` -- ``F.scaled_dot_product_attention`` over all ``S`` slots with the mask; ``"triton"`` --
    :func:`peagle_lab.kernels.cache_attention.cache_attention` (two small kernels whose cost follows the
    live slots; on CPU it runs in Triton's interpreter, float32 / float16 only).
    """

    def __init__(self, target: Target, max_len: int, attention: str = "auto"):
        cfg = target.config
        if getattr(cfg, "hidden_act", "silu") != "silu":
            raise ValueError("the fast engine's Llama forward uses SiLU; this target's hidden_act is "
                             f"{cfg.hidden_act!r} (use the teaching engine: engine='teaching')")
        decoder = target.model.get_decoder()
        self.layers = decoder.layers
        self.embed = decoder.embed_tokens.weight                           # (V, H)
        self.final_norm = decoder.norm
        self.head = target.model.get_output_embeddings().weight            # (V, H), may be the embedding (tied)
        self.eps = float(cfg.rms_norm_eps)
        with torch.no_grad():
            self.qkv = [_cat_linear(l.self_attn.q_proj, l.self_attn.k_proj, l.self_attn.v_proj) for l in self.layers]
            self.gate_up = [_cat_linear(l.mlp.gate_proj, l.mlp.up_proj)[0] for l in self.layers]   # (2I, H) each
        self.nh = int(cfg.num_attention_heads)
        self.nkv = int(getattr(cfg, "num_key_value_heads", None) or self.nh)
        self.hd = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.nh)
        self.rep = self.nh // self.nkv
        self.attention = resolve_attention(attention, self.embed.device, (self.hd,))
        self.aux_layer_ids = tuple(target.aux_layer_ids)
        self.max_len = int(max_len)
        dtype, device = self.embed.dtype, self.embed.device
        L = len(self.layers)
        # One (nkv, S, hd) tensor per layer rather than one (L, ...) block: torch.compile writes new slots
        # in place into a whole tensor, but into a slice of one it copies the whole block every step.
        self.keys = [torch.zeros(self.nkv, self.max_len, self.hd, dtype=dtype, device=device) for _ in range(L)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.slots = torch.arange(self.max_len, device=device)                                    # (S,)
        with torch.no_grad():                                               # the model's own RoPE, every position
            cos, sin = decoder.rotary_emb(self.keys[0][:1, :1], self.slots[None])                 # (1, S, hd)
        half = self.hd // 2                 # rotate_half(x) * sin == roll(x, hd/2) * (sin with its first half negated)
        self.cos, self.sin = cos[0], torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)     # (S, hd)
        self.inter = int(cfg.intermediate_size)

    @property
    def weight_bytes(self) -> int:
        """Bytes of weight one forward streams: every layer, the final norm and the output layer (the
        input embedding is looked up a row at a time; tied to the output layer it counts once)."""
        layers = [p for layer in self.layers for p in layer.parameters()]
        return tensor_bytes([self.head, self.final_norm.weight, *layers])

    def _attention(self, i: int, attn, x: torch.Tensor, cos, sin, positions, mask) -> torch.Tensor:
        T, nq = x.shape[1], self.nh + self.nkv
        qkv = F.linear(x, *self.qkv[i]).view(1, T, nq + self.nkv, self.hd)  # (1, T, nh+2nkv, hd)
        qk, v = qkv[:, :, :nq], qkv[0, :, nq:]                              # (1, T, nh+nkv, hd), (T, nkv, hd)
        qk = qk * cos + qk.roll(self.hd // 2, dims=-1) * sin                # RoPE on q and k at once
        q, k = qk[:, :, : self.nh].transpose(1, 2), qk[0, :, self.nh:]      # (1, nh, T, hd), (T, nkv, hd)
        self.keys[i].index_copy_(1, positions, k.transpose(0, 1))           # write this step's slots in place
        self.values[i].index_copy_(1, positions, v.transpose(0, 1))
        # Grouped-query attention without repeating K/V: the rep query heads sharing a KV head become
        # rep*T query rows of that head (head h = g*rep + r -> row r*T + t of group g).
        q = q.reshape(1, self.nkv, self.rep * T, self.hd)                   # (1, nkv, rep*T, hd)
        if self.attention == "triton":                                      # row r*T+t sees slots <= positions[t]
            out = attend_cache(q[0], self.keys[i], self.values[i], positions)[None]
        else:
            out = F.scaled_dot_product_attention(q, self.keys[i][None], self.values[i][None], attn_mask=mask)
        out = out.reshape(1, self.nh, T, self.hd).transpose(1, 2).reshape(1, T, self.nh * self.hd)  # (1, T, nh*hd)
        return F.linear(out, attn.o_proj.weight, attn.o_proj.bias)

    def _mlp(self, i: int, mlp, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(x, self.gate_up[i]).split(self.inter, dim=-1)   # (1, T, I) each
        return F.linear(F.silu(gate) * up, mlp.down_proj.weight)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, aux: bool = True, rows: torch.Tensor | None = None):
        """``ids (T,)`` at ``positions (T,)`` -> ``(logits (T, V) float32, aux (T, 3H) or None)``; with
        ``rows (R,)`` (a device tensor of row indices) the logits of those rows only, ``(R, V)``."""
        x = F.embedding(ids, self.embed)[None]                              # (1, T, H)
        cos, sin = self.cos[positions][None, :, None], self.sin[positions][None, :, None]   # (1, T, 1, hd)
        mask = None
        if self.attention == "sdpa":
            allowed = self.slots[None, :] <= positions[:, None]             # (T, S): the whole cache, causal
            mask = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill_(~allowed, float("-inf"))
            mask = mask.repeat(self.rep, 1)                                 # (rep*T, S) rows as in _attention
        taps = {}
        for i, layer in enumerate(self.layers):
            if aux and i in self.aux_layer_ids:
                taps[i] = x                                                 # EAGLE-3 taps: inputs of layers
            h = rms_norm(x, layer.input_layernorm.weight, self.eps)
            x = x + self._attention(i, layer.self_attn, h, cos, sin, positions, mask)
            x = x + self._mlp(i, layer.mlp, rms_norm(x, layer.post_attention_layernorm.weight, self.eps))
        if rows is not None:                                                # a prompt's pass: its last row only
            x = x.index_select(1, rows)                                     # (1, R, H)
        logits = F.linear(rms_norm(x, self.final_norm.weight, self.eps), self.head).float()   # (1, T, V)
        feats = torch.cat([taps[i] for i in self.aux_layer_ids], dim=-1)[0] if aux else None  # (T, 3H)
        return logits[0], feats
