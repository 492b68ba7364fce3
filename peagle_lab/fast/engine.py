"""The fast engine: the teaching engine's loop over static caches, each step a replayed CUDA graph.

``generate_fast(target, prompt_ids, method=...)`` returns what :func:`peagle_lab.engine.generate`
returns, token for token at T = 0 (the oracle tests check it). A step is

1. ``draft``  -- the drafter reads the new context (accepted drafts + bonus) and proposes K tokens;
2. ``verify`` -- the target scores ``[bonus, drafts]`` (K+1 positions), and on the device: greedy
   choice, accepted count ``n``, next bonus, next context, cache lengths;
3. one host sync -- ``n`` and the chosen tokens come back in one ``tolist()``.

Every buffer those steps touch is allocated up front, so on CUDA each of ``draft`` and ``verify``
is captured once per (method, K) and replayed (:class:`~peagle_lab.fast.graphs.StepGraph`);
rollback is the length counter ``t_len`` / ``d_len`` moving. AR is the same loop with K = 0 and no
drafter (``verify`` of one token = decode). The prompt's pass is padded to a multiple of
``PROMPT_BUCKET`` tokens and captured once per bucket on CUDA (``prompt_graphs``); it runs SDPA
without cuDNN, which would build a plan for every new prompt length.

``compile=True`` fuses each step with ``torch.compile`` before it is captured (one compiled graph per
fixed shape; :func:`~peagle_lab.fast.graphs.compile_step`): the same math in fewer kernels.

Sampling (T > 0) is not on the fast path: it falls back to the teaching engine.
"""
from __future__ import annotations

import time
import weakref

import torch

from ..compat import check_compatible
from ..device import sdpa_without_cudnn
from ..drafter import Eagle3Drafter
from ..engine import METHODS, SpecResult, Step, StepTimes, _finish, check_request, generate
from ..stats import AcceptanceStats
from ..target import Target
from .draft import StaticDrafterCache, draft_static
from .graphs import StepGraph, compile_mode
from .llama import StaticTarget, check_attention, resolve_attention

_STATIC: "weakref.WeakKeyDictionary[Target, dict]" = weakref.WeakKeyDictionary()


def static_target(target: Target, max_len: int, attention: str = "auto") -> StaticTarget:
    """One static target (weights shared, KV cache of ``max_len``) per target, length and attention."""
    attention = resolve_attention(attention, target.device, (target_head_dim(target),))
    table = _STATIC.setdefault(target, {})
    key = ("target", max_len, attention)
    if key not in table:
        table[key] = StaticTarget(target, max_len, attention)
    return table[key]


def target_head_dim(target: Target) -> int:
    cfg = target.config
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def engine_attention(attention: str, target: Target, drafter: Eagle3Drafter | None) -> str:
    """``attention`` for a (target, drafter) pair: ``"auto"`` resolved with both models' head dims."""
    dims = (target_head_dim(target),) + ((drafter.cfg.head_dim,) if drafter is not None else ())
    return resolve_attention(attention, target.device, dims)


PROMPT_BUCKET = 64       # prompt lengths are padded to a multiple of this: one captured prompt graph per bucket


def prompt_sdpa(device: torch.device, skip_cudnn: bool = True):
    """SDPA for a prompt's pass without its cuDNN backend (on CUDA; :func:`peagle_lab.device.sdpa_without_cudnn`):
    cuDNN builds a plan for every new prompt length, ~90 ms on the H200 (step_profile_h200_attention.json),
    against ~20 ms for the whole eager pass through the flash / memory-efficient kernels. The captured
    steps keep every backend."""
    return sdpa_without_cudnn(device, skip_cudnn)


class FastEngine:
    """Static buffers and captured steps for one (target, method, drafter, K, max_len)."""

    def __init__(self, target: Target, method: str, drafter: Eagle3Drafter | None, k: int, max_len: int,
                 capture: bool = True, compile: bool | str = False, attention: str = "auto",
                 prompt_graphs: bool | None = None):
        self.method, self.drafter, self.max_len = method, drafter, max_len
        self.attention = attention = engine_attention(attention, target, drafter)
        self.k = k if method != "ar" else 0
        self.st = static_target(target, max_len, attention)
        dev = self.device = target.device
        K = self.k
        long = dict(dtype=torch.long, device=dev)
        self.bonus = torch.zeros(1, **long)                # last emitted token, not yet in the target cache
        self.drafts = torch.zeros(K, **long)               # (K,)
        self.t_len = torch.zeros(1, **long)                # target cache length
        self.packed = torch.zeros(2 * K + 2, **long)       # host's view of a step: [n, choice (K+1), drafts (K)]
        self.arange = torch.arange(K + 1, **long)
        # The prompt's pass in fixed-shape buckets (PROMPT_BUCKET-token multiples, the tail padded), one graph each,
        # captured on first use: default on CUDA (capture on), where an eager pass is ~860 launches (~20 ms).
        self.prompt_graphs = (capture and dev.type == "cuda") if prompt_graphs is None else bool(prompt_graphs)
        self.p_ids = torch.zeros(max_len, **long)          # the prompt, padded to its bucket
        self.p_len = torch.ones(1, **long)                 # its real length
        self.p_arange = torch.arange(max_len, **long)
        self._prompt_steps: dict[int, StepGraph] = {}
        # One memory pool for every bucket's graph: nothing a pass leaves in the pool is read later (results go to
        # the static buffers), and the passes never overlap, so all buckets can reuse the largest one's memory.
        shared = self.prompt_graphs and capture and dev.type == "cuda"
        self._prompt_pool = torch.cuda.graph_pool_handle() if shared else None
        self.prompt_skips_cudnn = True                     # prompt_sdpa; step_profile.py turns it off to time cuDNN
        self._capture = capture
        if drafter is not None:
            H3 = len(target.aux_layer_ids) * target.hidden_size
            self.ctx_tok = torch.zeros(K + 1, **long)      # (K+1,) first ctx_n are real
            self.ctx_aux = torch.zeros(K + 1, H3, dtype=self.st.embed.dtype, device=dev)  # (K+1, 3H)
            self.ctx_n = torch.ones(1, **long)
            self.d_len = torch.zeros(1, **long)
            # scratch for padding slots; slot counts kept multiples of 16 (aligned masks for fused attention)
            pad = max(PROMPT_BUCKET if self.prompt_graphs else 0, K + 1)        # a bucket's padding, a step's
            self.dcache = StaticDrafterCache(drafter, max_len, scratch=-(-pad // 16) * 16, attention=attention)
        self.verify = StepGraph(self._verify, dev, capture=capture, compile=compile)
        self.draft = StepGraph(self._draft, dev, capture=capture, compile=compile) if drafter is not None else None
        self.reason = self.verify.reason
        self.compile_s = self.verify.compile_s + (self.draft.compile_s if self.draft is not None else 0.0)

    # ----------------------------------------------------------------------------- the two steps
    def _draft(self) -> None:
        drafts = draft_static(self.drafter, self.dcache, self.ctx_tok, self.ctx_aux, self.ctx_n, self.d_len,
                              self.k, parallel=self.method == "peagle")
        self.drafts.copy_(drafts)

    def _verify(self) -> None:
        ids = torch.cat([self.bonus, self.drafts])                          # (K+1,)
        logits, aux = self.st.forward(ids, self.t_len + self.arange, aux=self.drafter is not None)
        choice = logits.argmax(-1)                                          # (K+1,) target's greedy tokens
        n = (self.drafts == choice[:-1]).long().cumprod(0).sum(0, keepdim=True)   # (1,) accepted drafts
        self.bonus.copy_(choice.gather(0, n))
        self.t_len.add_(n + 1)                                              # keep old bonus + n accepted
        self.packed.copy_(torch.cat([n, choice, self.drafts]))
        if self.drafter is not None:                                        # next context: choice[:n+1], aux[:n+1]
            self.ctx_tok.copy_(choice)
            self.ctx_aux.copy_(aux)
            self.ctx_n.copy_(n + 1)

    def _prompt_step(self, bucket: int) -> None:
        """The prompt's pass at a fixed length: ``p_ids[:bucket]`` (the first ``p_len`` real, the rest
        padding) through the target, the first token, and the drafter's first pass. Padded rows write
        target cache slots past the prompt (stale: a later step overwrites a slot before any query sees
        it) and drafter slots in its scratch region; only the last real row's logits are computed."""
        ids, T = self.p_ids[:bucket], self.p_len
        logits, aux = self.st.forward(ids, self.p_arange[:bucket], aux=self.drafter is not None, rows=T - 1)
        self.bonus.copy_(logits[0].argmax(-1, keepdim=True))
        self.t_len.copy_(T)
        if self.drafter is not None:                                        # slot j: features at j, token at j+1
            self.d_len.zero_()
            ctx_tok = torch.where(self.p_arange[:bucket] == T - 1, self.bonus, ids.roll(-1))   # (bucket,)
            drafts = draft_static(self.drafter, self.dcache, ctx_tok, aux, T, self.d_len, self.k,
                                  parallel=self.method == "peagle")
            self.drafts.copy_(drafts)

    def _prefill(self, prompt_ids: list[int]) -> int:
        """The prompt through the target (and the drafter's first pass); returns the first token. With
        ``prompt_graphs`` a bucket's captured graph (:meth:`_prompt_step`), otherwise eager at the
        prompt's own length."""
        if self.prompt_graphs:
            T = len(prompt_ids)
            bucket = min(-(-T // PROMPT_BUCKET) * PROMPT_BUCKET, self.max_len)
            self.p_ids[:T].copy_(torch.tensor(prompt_ids), non_blocking=False)
            self.p_len.fill_(T)
            with prompt_sdpa(self.device, self.prompt_skips_cudnn):         # a capture bakes the backend in
                if bucket not in self._prompt_steps:
                    self._prompt_steps[bucket] = StepGraph(lambda: self._prompt_step(bucket), self.device,
                                                           capture=self._capture, pool=self._prompt_pool)
                self._prompt_steps[bucket]()
            return int(self.bonus.item())
        prompt = torch.tensor(prompt_ids, device=self.device)
        T = prompt.shape[0]
        with prompt_sdpa(self.device, self.prompt_skips_cudnn):
            logits, aux = self.st.forward(prompt, torch.arange(T, device=self.device), aux=self.drafter is not None)
            self.bonus.copy_(logits[-1].argmax(-1, keepdim=True))
            self.t_len.fill_(T)
            if self.drafter is not None:                                    # slot j: features at j, token at j+1
                self.d_len.zero_()
                ctx_tok = torch.cat([prompt[1:], self.bonus])               # (T,)
                drafts = draft_static(self.drafter, self.dcache, ctx_tok, aux, torch.full_like(self.d_len, T),
                                      self.d_len, self.k, parallel=self.method == "peagle")
                self.drafts.copy_(drafts)
        return int(self.bonus.item())

    # ----------------------------------------------------------------------------- the loop
    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos: tuple[int, ...] = (),
                 time_split: bool = True) -> SpecResult:
        need = len(prompt_ids) + max_new_tokens + self.k + 1
        if need > self.max_len:
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({max_new_tokens}) + K+1 ({self.k + 1}) "
                             f"= {need} exceeds the static cache of {self.max_len} positions: pass max_len >= {need}")
        cuda = self.device.type == "cuda" and time_split
        stats = AcceptanceStats(self.k) if self.drafter is not None else None
        times, steps = StepTimes(), []
        t0 = time.perf_counter()
        tokens, done = _finish([self._prefill(prompt_ids)], max_new_tokens, eos)
        times.prefill = time.perf_counter() - t0
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if cuda else None
        while not done:
            t1 = time.perf_counter()
            if cuda:
                events[0].record()
            if steps and self.draft is not None:                            # the first drafts came with prefill
                self.draft()
            if cuda:
                events[1].record()
            t2 = time.perf_counter()
            self.verify()
            if cuda:
                events[2].record()
            out = self.packed.tolist()                                      # the step's one host sync
            t3 = time.perf_counter()
            K = self.k
            n, choice, drafts = out[0], out[1: K + 2], out[K + 2:]
            if stats is not None:                                           # AR keeps no steps, as engine.generate
                stats.record(n)
                steps.append(Step(drafts, n, choice[n]))
            tokens, done = _finish(tokens + choice[: n + 1], max_new_tokens, eos)
            if cuda:                                                        # GPU time; host = the rest of the step
                draft_s, verify_s = events[0].elapsed_time(events[1]) / 1e3, events[1].elapsed_time(events[2]) / 1e3
            else:
                draft_s, verify_s = t2 - t1, t3 - t2
            times.draft += draft_s
            times.verify += verify_s
            times.bookkeeping += max(0.0, time.perf_counter() - t1 - draft_s - verify_s)
        return SpecResult(tokens=tokens, prompt_len=len(prompt_ids), seconds=time.perf_counter() - t0,
                          acceptance=stats, times=times, steps=steps,
                          stats={"engine": "fast", "graphs": self.verify.captured, "graph_note": self.reason,
                                 "compiled": self.verify.compiled, "compile_s": self.compile_s})


_ENGINES: "weakref.WeakKeyDictionary[Target, dict]" = weakref.WeakKeyDictionary()


def fast_engine(target: Target, method: str, drafter: Eagle3Drafter | None, k: int, max_len: int,
                capture: bool = True, compile: bool | str = False, attention: str = "auto",
                prompt_graphs: bool | None = None) -> FastEngine:
    """The engine for this configuration, built (its steps compiled and captured) on first use."""
    attention = engine_attention(attention, target, drafter)
    if prompt_graphs is None:
        prompt_graphs = capture and target.device.type == "cuda"
    table = _ENGINES.setdefault(target, {})
    key = (method, id(drafter), k if method != "ar" else 0, max_len, capture, compile_mode(compile), prompt_graphs,
           attention)
    if key not in table:                           # the engine holds the drafter, so id() stays unique
        table[key] = FastEngine(target, method, drafter, k, max_len, capture=capture, compile=compile,
                                attention=attention, prompt_graphs=prompt_graphs)
    return table[key]


@torch.inference_mode()       # capture and warm-up too: no autograd state in any static buffer
def generate_fast(target: Target, prompt_ids: list[int], *, method: str = "peagle", drafter: Eagle3Drafter | None = None,
                  k: int = 5, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
                  seed: int | None = None, stop_at_eos: bool = True, max_len: int = 2048, capture: bool = True,
                  time_split: bool = True, compile: bool | str = False, attention: str = "auto",
                  prompt_graphs: bool | None = None) -> SpecResult:
    """:func:`peagle_lab.engine.generate` over static caches and captured steps (greedy).

    ``max_len``: the static cache size, rounded up to a multiple of 64 (prompt + max_new_tokens + K + 1
    must fit; one cache and one set of graphs per size, so keep it fixed across prompts). ``capture=False``
    runs the same fixed-shape steps eagerly. ``compile=True`` fuses each step with ``torch.compile`` first
    (the first call per configuration pays the compile: ``stats["compile_s"]``); a string picks inductor's
    mode (``"max-autotune-no-cudagraphs"``: matmul autotuning and epilogue fusion, a longer compile).
    ``attention``: the target's and the drafter's attention over their caches: ``"auto"`` (``"triton"`` on
    CUDA, ``"sdpa"`` elsewhere), ``"sdpa"`` or ``"triton"`` (:class:`~peagle_lab.fast.llama.StaticTarget`).
    A prompt's pass runs SDPA without cuDNN on CUDA (:func:`prompt_sdpa`). ``prompt_graphs`` (default: on
    CUDA with ``capture``) pads it to a multiple of ``PROMPT_BUCKET`` tokens and replays one captured graph
    per bucket (the first prompt in a bucket captures it); ``False`` runs it eagerly at its own length. ``temperature > 0`` falls back to the teaching engine.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if temperature > 0:
        out = generate(target, prompt_ids, method=method, drafter=drafter, k=k, max_new_tokens=max_new_tokens,
                       temperature=temperature, top_p=top_p, seed=seed, stop_at_eos=stop_at_eos)
        out.stats["engine"] = "teaching (the fast engine is greedy only; sampling falls back)"
        return out
    check_request(target, prompt_ids, max_new_tokens, k if method != "ar" else 0, temperature, top_p)
    if method != "ar":
        if drafter is None:
            raise ValueError(f"method {method!r} needs a drafter (pass drafter=load_drafter(...))")
        if k < 1:
            raise ValueError("k (draft tokens per step) must be >= 1")
        check_compatible(drafter, target, k if method == "peagle" else None)
        if drafter.fc.weight.device != target.device:
            raise ValueError(f"drafter is on {drafter.fc.weight.device}, target on {target.device}: "
                             "move it with drafter.to(target.device) (load_drafter(path, target) does)")
        if method == "peagle" and drafter.mask_hidden is None:
            raise ValueError("parallel drafting needs a P-EAGLE drafter (mask token + mask_hidden); "
                             "this one is sequential-only: use method 'eagle' or a P-EAGLE checkpoint")
    compile_mode(compile)                          # a bad mode fails here, before anything is built
    check_attention(attention)
    max_len = -(-int(max_len) // 64) * 64
    engine = fast_engine(target, method, drafter if method != "ar" else None, k, max_len, capture, compile, attention,
                         prompt_graphs)
    return engine.generate(prompt_ids, max_new_tokens, target.eos_token_ids if stop_at_eos else (), time_split)
