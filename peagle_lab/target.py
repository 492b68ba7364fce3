"""The target model: a Hugging Face causal LM with a KV cache and EAGLE-3 feature taps.

Notation used across peagle_lab: the *target* ``M_p`` is the model whose output we must
reproduce; the *drafter* ``M_q`` proposes tokens. ``H`` is the target hidden size and ``V`` its
vocabulary size.

EAGLE-3 drafters read the target's hidden states at three depths. vLLM's convention, followed
here, is the hidden state at the *input* of decoder layers ``(2, L//2, L-3)`` -- in
transformers' terms ``output_hidden_states[i]`` is the input of layer ``i``. Rather than asking
transformers for all ``L+1`` hidden states, forward pre-hooks on just those three layers copy
their inputs, concatenated into one ``(B, T, 3H)`` tensor.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from . import kvcache
from .assets import resolve_target
from .device import resolve_device


def default_aux_layer_ids(num_layers: int) -> tuple[int, int, int]:
    """vLLM's default EAGLE-3 taps: inputs of layers 2, L//2 and L-3."""
    return (2, num_layers // 2, num_layers - 3)


def eos_token_ids(*sources) -> tuple[int, ...]:
    """Every end-of-sequence id the ``sources`` name (a generation config, a model config, a tokenizer; None
    skipped), sorted: a reply ends at the first of them."""
    ids = set()
    for source in sources:
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return tuple(sorted(ids))


def _load_problem(asked, path: str, err: Exception) -> str:
    """Why ``path`` (what ``--target asked`` resolved to) did not load, with the fix."""
    from pathlib import Path

    folder = Path(path)
    if folder.is_dir():
        if (folder / "config.json").is_file() and '"draft_vocab_size"' in (folder / "config.json").read_text():
            return f"target {asked}: {path} holds a drafter, not a target model; pass the model it drafts for"
        return (f"target {asked}: {path} is not a model folder transformers can load (a tokenizer and weights beside "
                f"config.json): {str(err).splitlines()[0][:200]}")
    return (f"target {asked}: no such folder here, and Hugging Face could not give a model of that id (no network, "
            f"or no such id: {str(err).splitlines()[0][:160]}); pass a local model folder, or leave --target out for "
            "the embedded SmolLM2")


@contextmanager
def _quiet_loading():
    """transformers' "Loading weights" bar off while a target loads (in a notebook it stays behind as a 0% line),
    and back as it was afterwards."""
    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


@dataclass
class TargetOutput:
    logits: torch.Tensor          # (B, T, V) float32
    aux: torch.Tensor | None      # (B, T, 3H) inputs of the tapped layers, or None


@dataclass
class Generation:
    """Result of one generation: new token ids and how long it took."""
    tokens: list[int]
    prompt_len: int
    seconds: float
    stats: dict = field(default_factory=dict)   # how it was made (the fast engine: engine, graphs, graph_note)


class Target:
    """A causal LM wrapped for speculative decoding: cached forward, taps, rollback, a greedy reference."""

    def __init__(self, model, tokenizer, aux_layer_ids: tuple[int, ...] | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.layers = model.get_decoder().layers
        self.num_layers = len(self.layers)
        self.hidden_size = int(self.config.hidden_size)
        self.vocab_size = int(self.config.vocab_size)
        self.aux_layer_ids = tuple(aux_layer_ids or default_aux_layer_ids(self.num_layers))
        bad = [i for i in self.aux_layer_ids if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(f"aux layer ids {bad} are outside 0..{self.num_layers - 1} "
                             f"for this {self.num_layers}-layer target")
        self.eos_token_ids = self._eos_ids()
        self._captured: dict[int, torch.Tensor] = {}
        self._capture = False
        for i in self.aux_layer_ids:
            self.layers[i].register_forward_pre_hook(self._make_hook(i), with_kwargs=True)

    # ----------------------------------------------------------------------------- loading
    @classmethod
    def load(cls, name_or_path: str | None = None, *, dtype: torch.dtype = torch.float32,
             device: str | torch.device = "cpu", aux_layer_ids: tuple[int, ...] | None = None) -> "Target":
        """Load a target by HF id or folder; ``None`` = the embedded SmolLM2-135M-Instruct.

        ``device``: ``"cpu"``, ``"cuda"``, ... or ``"auto"`` (CUDA when present; :mod:`peagle_lab.device`).
        ``dtype``: the weights' dtype (float32 on CPUs without native bf16; bf16 halves a GPU's weight reads)."""
        path = resolve_target(name_or_path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            with _quiet_loading():
                model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        except (OSError, ValueError) as err:    # no such hub id, offline, a drafter's folder: name what to pass
            raise ValueError(_load_problem(name_or_path, path, err)) from err
        return cls(model.to(resolve_device(device)), tokenizer, aux_layer_ids)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def name(self) -> str:
        return str(getattr(self.config, "_name_or_path", "") or type(self.model).__name__)

    def _eos_ids(self) -> tuple[int, ...]:
        return eos_token_ids(getattr(self.model, "generation_config", None), self.config, self.tokenizer)

    # ----------------------------------------------------------------------------- taps
    def _make_hook(self, layer_id: int):
        def hook(module, args, kwargs):
            if self._capture:
                hidden = args[0] if args else kwargs["hidden_states"]
                self._captured[layer_id] = hidden
        return hook

    # ----------------------------------------------------------------------------- cache
    def new_cache(self):
        return kvcache.new_cache(self.model)

    @staticmethod
    def cache_length(cache) -> int:
        return kvcache.cache_length(cache)

    @staticmethod
    def rollback(cache, length: int) -> None:
        """Forget every cached position from ``length`` on (rejected draft tokens)."""
        kvcache.crop(cache, length)

    # ----------------------------------------------------------------------------- forward
    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, cache, *, aux: bool = True, positions: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> TargetOutput:
        """Run new tokens ``(B, T)`` (or ``(T,)``) after what ``cache`` holds; extends the cache.

        By default every row continues at position ``cache length``. The batched engine passes
        per-row ``positions (B, T)`` and a 4D additive ``attention_mask (B, 1, T, cache + T)``
        instead (see :mod:`peagle_lab.engines.batch_cache`).
        """
        if input_ids.dim() == 1:
            input_ids = input_ids[None]
        if positions is None:
            start = kvcache.cache_length(cache)
            positions = torch.arange(start, start + input_ids.shape[1], device=input_ids.device)[None]
        extra = {} if attention_mask is None else {"attention_mask": attention_mask.to(self.device)}
        self._capture, self._captured = aux, {}
        try:
            out = self.model(input_ids=input_ids.to(self.device), past_key_values=cache,
                             position_ids=positions.to(self.device), use_cache=True, **extra)
        finally:
            self._capture = False
        feats = torch.cat([self._captured[i] for i in self.aux_layer_ids], dim=-1) if aux else None  # (B, T, 3H)
        self._captured = {}
        return TargetOutput(logits=out.logits.float(), aux=feats)

    @torch.no_grad()
    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Training-time pass over a right-padded batch ``(B, N)``, no cache.

        Returns the final normed hidden states ``(B, N, H)`` (multiply by a slice of the output
        embedding for logits over just the draft vocabulary) and the taps ``(B, N, 3H)``.
        """
        self._capture, self._captured = True, {}
        try:
            out = self.model.get_decoder()(input_ids=input_ids.to(self.device),
                                           attention_mask=attention_mask.to(self.device), use_cache=False)
        finally:
            self._capture = False
        aux = torch.cat([self._captured[i] for i in self.aux_layer_ids], dim=-1)
        self._captured = {}
        return out.last_hidden_state, aux

    # ----------------------------------------------------------------------------- text
    def chat_ids(self, prompt: str) -> list[int]:
        """Token ids of ``prompt`` as one user turn in the chat template, ready for the reply."""
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                      tokenize=False, add_generation_prompt=True)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return list(self.tokenizer(prompt)["input_ids"])

    def chat_history_ids(self, turns: list[str], replies: list[list[int]]) -> list[int]:
        """Token ids of a multi-turn chat: user ``turns[i]`` answered by ``replies[i]`` (token ids, as generated,
        EOS included) for every reply given, then the next user turn ready for its reply."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("multi-turn data needs a chat template; this tokenizer has none")
        ids = self.chat_ids(turns[0])
        opened = self.tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                                    add_generation_prompt=True)
        for turn, reply in zip(turns[1:], replies):
            # the template's text between an assistant reply's content and the next reply's first token
            full = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                 {"role": "user", "content": turn}],
                tokenize=False, add_generation_prompt=True)
            tail = list(self.tokenizer(full[len(opened) + 1:], add_special_tokens=False)["input_ids"])
            reply = list(reply)
            if reply and reply[-1] in self.eos_token_ids and tail and tail[0] == reply[-1]:
                tail = tail[1:]                                    # the reply's own EOS closes the turn
            ids = ids + reply + tail
        return ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ----------------------------------------------------------------------------- the greedy reference
    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], max_new_tokens: int, *, stop_at_eos: bool = True) -> Generation:
        """Plain greedy decoding, one target forward per token: the reference the oracle tests hold every
        engine to (the engines' own AR is their loop with K = 0, :mod:`peagle_lab.engines`)."""
        t0 = time.perf_counter()
        cache = self.new_cache()
        logits = self.forward(torch.tensor(prompt_ids), cache, aux=False).logits[0, -1]
        tokens: list[int] = []
        while len(tokens) < max_new_tokens:
            tokens.append(int(logits.argmax()))
            if (stop_at_eos and tokens[-1] in self.eos_token_ids) or len(tokens) == max_new_tokens:
                break
            logits = self.forward(torch.tensor(tokens[-1:]), cache, aux=False).logits[0, -1]
        return Generation(tokens=tokens, prompt_len=len(prompt_ids), seconds=time.perf_counter() - t0)
