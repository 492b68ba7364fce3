"""The fast engine: the teaching engine's loop over static caches, each step a replayed CUDA graph.

``generate_fast(target, prompt_ids, method=...)`` returns what :func:`peagle_lab.engines.teaching.generate`
returns, token for token at T = 0 (the oracle tests check it). A step is

1. ``draft``  -- the drafter reads the new context (accepted drafts + the target's token) and proposes K tokens;
2. ``verify`` -- the target scores ``[its last token, drafts]`` (K+1 positions), and on the device: greedy
   choice, accepted count ``n`` (:func:`~peagle_lab.engines.verify.accepted_prefix`), the target's next
   token, next context, cache lengths;
3. one host sync -- ``n`` and the chosen tokens come back in one ``tolist()``.

Every buffer those steps touch is allocated up front, so on CUDA each of ``draft`` and ``verify``
is captured once per (method, K) and replayed (:class:`~peagle_lab.engines.fast.graphs.StepGraph`);
rollback is a cache length counter (``target_len``, ``drafter_len``) moving. AR is the same loop with K = 0
and no drafter (``verify`` of one token = decode). The options (cache size, capture, compile, attention,
prompt graphs) come as one resolved :class:`~peagle_lab.engines.fast.config.FastConfig`, which with
the method, drafter and K keys the engine cache. The prompt's pass is padded to a multiple of
``PROMPT_BUCKET`` tokens and captured once per bucket on CUDA (``prompt_graphs``); it runs SDPA
without cuDNN, which would build a plan for every new prompt length.

``compile`` fuses each step with ``torch.compile`` before it is captured (one compiled graph per
fixed shape; :func:`~peagle_lab.engines.fast.graphs.compile_step`): the same math in fewer kernels.

Sampling (T > 0) is not on the fast path: it falls back to the teaching engine.
"""
from __future__ import annotations

import weakref

import torch

from ...device import sdpa_without_cudnn
from ...drafter import Eagle3Drafter
from ...target import Target
from ..request import Request, SpecResult, check_request
from ..teaching import generate
from ..timing import StepTimer
from ..verify import accepted_prefix
from .config import PROMPT_BUCKET, FastConfig
from .draft import STATIC_DRAFTERS, StaticDrafterCache
from .graphs import StepGraph, module_weight_bytes
from .llama import StaticTarget

_STATIC: "weakref.WeakKeyDictionary[Target, dict]" = weakref.WeakKeyDictionary()


def static_target(target: Target, config: FastConfig) -> StaticTarget:
    """One static target (weights shared, KV cache of ``max_len``) per target, length and attention."""
    table = _STATIC.setdefault(target, {})
    key = (config.max_len, config.attention)
    if key not in table:
        table[key] = StaticTarget(target, config.max_len, config.attention)
    return table[key]


def prompt_sdpa(device: torch.device, skip_cudnn: bool = True):
    """SDPA for a prompt's pass without its cuDNN backend (on CUDA; :func:`peagle_lab.device.sdpa_without_cudnn`):
    cuDNN builds a plan for every new prompt length, ~90 ms on the H200 (step_profile_h200_attention.json),
    against ~20 ms for the whole eager pass through the flash / memory-efficient kernels. The captured
    steps keep every backend."""
    return sdpa_without_cudnn(device, skip_cudnn)


class FastEngine:
    """Static buffers and captured steps for one (target, method, drafter, K, resolved config)."""

    def __init__(self, target: Target, method: str, drafter: Eagle3Drafter | None, k: int, config: FastConfig):
        self.method, self.drafter, self.config = method, drafter, config
        self.max_len, self.attention, self.prompt_graphs = config.max_len, config.attention, config.prompt_graphs
        self.k = K = k if method != "ar" else 0
        self.st = static_target(target, config)
        dev = self.device = target.device
        long = dict(dtype=torch.long, device=dev)
        self.next_token = torch.zeros(1, **long)           # the target's last token, not yet in its cache
        self.drafts = torch.zeros(K, **long)               # (K,)
        self.target_len = torch.zeros(1, **long)           # target cache length
        self.packed = torch.zeros(2 * K + 2, **long)       # host's view of a step: [n, choice (K+1), drafts (K)]
        self.arange = torch.arange(K + 1, **long)
        # The prompt's pass in fixed-shape buckets (PROMPT_BUCKET-token multiples, the tail padded), one graph each,
        # captured on first use: default on CUDA (capture on), where an eager pass is ~860 launches (~20 ms).
        self.p_ids = torch.zeros(self.max_len, **long)     # the prompt, padded to its bucket
        self.p_len = torch.ones(1, **long)                 # its real length
        self.p_arange = torch.arange(self.max_len, **long)
        self._prompt_steps: dict[int, StepGraph] = {}
        # One memory pool for every bucket's graph: nothing a pass leaves in the pool is read later (results go to
        # the static buffers), and the passes never overlap, so all buckets can reuse the largest one's memory.
        shared = self.prompt_graphs and config.capture and dev.type == "cuda"
        self._prompt_pool = torch.cuda.graph_pool_handle() if shared else None
        self.prompt_skips_cudnn = True                     # prompt_sdpa; step_profile.py turns it off to time cuDNN
        if drafter is not None:
            self.draft_fn = STATIC_DRAFTERS[method]
            aux_dim = len(target.aux_layer_ids) * target.hidden_size   # 3H: features from three target layers
            self.ctx_tok = torch.zeros(K + 1, **long)      # (K+1,) first ctx_len are real
            self.ctx_aux = torch.zeros(K + 1, aux_dim, dtype=self.st.embed.dtype, device=dev)  # (K+1, 3H)
            self.ctx_len = torch.ones(1, **long)           # real context slots: accepted drafts + the target's token
            self.drafter_len = torch.zeros(1, **long)      # drafter cache length
            # scratch for padding slots; slot counts kept multiples of 16 (aligned masks for fused attention)
            pad = max(PROMPT_BUCKET if self.prompt_graphs else 0, K + 1)        # a bucket's padding, a step's
            self.dcache = StaticDrafterCache(drafter, self.max_len, scratch=-(-pad // 16) * 16,
                                             attention=self.attention)
        self.verify = StepGraph(self._verify, dev, capture=config.capture, compile=config.compile)
        self.draft = (StepGraph(self._draft, dev, capture=config.capture, compile=config.compile)
                      if drafter is not None else None)
        self.reason = self.verify.reason
        self.compile_s = self.verify.compile_s + (self.draft.compile_s if self.draft is not None else 0.0)

    # ----------------------------------------------------------------------------- what the engine says about itself
    def prompt_buckets(self, prompts: list[list[int]]) -> list[list[int]]:
        """One prompt of every bucket ``prompts`` fall into (what a warm-up runs to capture each bucket's
        graph once), or ``[]`` when the prompt's pass is not graphed."""
        if not self.prompt_graphs:
            return []
        return list({self.config.bucket(len(ids)): ids for ids in prompts}.values())

    def weight_bytes(self) -> dict:
        """Bytes of weight one step streams: ``{"target": ..., "drafter": ... or None}`` (embedding tables are
        looked up a row at a time, so they do not count; a tied output layer counts once)."""
        drafter = (module_weight_bytes(self.drafter, skip=("embed_tokens", "d2t", "t2d"))
                   if self.drafter is not None else None)
        return {"target": self.st.weight_bytes, "drafter": drafter}

    # ----------------------------------------------------------------------------- the two steps
    def _draft(self) -> None:
        self.drafts.copy_(self.draft_fn(self.drafter, self.dcache, self.ctx_tok, self.ctx_aux, self.ctx_len,
                                        self.drafter_len, self.k))

    def _verify(self) -> None:
        ids = torch.cat([self.next_token, self.drafts])                     # (K+1,)
        logits, aux = self.st.forward(ids, self.target_len + self.arange, aux=self.drafter is not None)
        choice = logits.argmax(-1)                                          # (K+1,) target's greedy tokens
        n = accepted_prefix(self.drafts, choice)[None]                      # (1,) accepted drafts
        self.next_token.copy_(choice.gather(0, n))
        self.target_len.add_(n + 1)                                         # keep the last token + n accepted
        self.packed.copy_(torch.cat([n, choice, self.drafts]))
        if self.drafter is not None:                                        # next context: choice[:n+1], aux[:n+1]
            self.ctx_tok.copy_(choice)
            self.ctx_aux.copy_(aux)
            self.ctx_len.copy_(n + 1)

    def _first(self, logits: torch.Tensor, aux, ctx_tok: torch.Tensor, T: torch.Tensor) -> None:
        """After the prompt's pass: the first token, and the drafter's first pass over the prompt
        (slot j: features at j, token at j+1; ``ctx_tok`` the prompt shifted, the first token last)."""
        self.next_token.copy_(logits[-1].argmax(-1, keepdim=True))
        self.target_len.copy_(T)
        if self.drafter is not None:
            self.drafter_len.zero_()
            ctx_tok = torch.where(self.p_arange[: ctx_tok.shape[0]] == T - 1, self.next_token, ctx_tok)
            self.drafts.copy_(self.draft_fn(self.drafter, self.dcache, ctx_tok, aux, T, self.drafter_len, self.k))

    def _prompt_step(self, bucket: int) -> None:
        """The prompt's pass at a fixed length: ``p_ids[:bucket]`` (the first ``p_len`` real, the rest
        padding) through the target, the first token, and the drafter's first pass. Padded rows write
        target cache slots past the prompt (stale: a later step overwrites a slot before any query sees
        it) and drafter slots in its scratch region; only the last real row's logits are computed."""
        ids, T = self.p_ids[:bucket], self.p_len
        logits, aux = self.st.forward(ids, self.p_arange[:bucket], aux=self.drafter is not None, rows=T - 1)
        self._first(logits, aux, ids.roll(-1), T)

    def _prefill(self, prompt_ids: list[int]) -> int:
        """The prompt through the target (and the drafter's first pass); returns the first token. With
        ``prompt_graphs`` a bucket's captured graph (:meth:`_prompt_step`), otherwise eager at the
        prompt's own length."""
        T = len(prompt_ids)
        with prompt_sdpa(self.device, self.prompt_skips_cudnn):             # a capture bakes the backend in
            if self.prompt_graphs:
                bucket = self.config.bucket(T)
                self.p_ids[:T].copy_(torch.tensor(prompt_ids), non_blocking=False)
                self.p_len.fill_(T)
                if bucket not in self._prompt_steps:
                    self._prompt_steps[bucket] = StepGraph(lambda: self._prompt_step(bucket), self.device,
                                                           capture=self.config.capture, pool=self._prompt_pool)
                self._prompt_steps[bucket]()
            else:
                prompt = torch.tensor(prompt_ids, device=self.device)
                logits, aux = self.st.forward(prompt, self.p_arange[:T], aux=self.drafter is not None)
                self._first(logits, aux, prompt.roll(-1), torch.full_like(self.p_len, T))
        return int(self.next_token.item())

    # ----------------------------------------------------------------------------- the loop
    def prefill(self, req: Request) -> None:
        self.req = req
        req.append([], 0, self._prefill(req.prompt))

    def step(self, timer: StepTimer) -> None:
        """Draft (the first drafts came with the prompt's pass), verify, one host sync, accept."""
        with timer("draft"):
            if self.req.steps and self.draft is not None:
                self.draft()
        with timer("verify"):
            self.verify()
        with timer("bookkeeping"):
            out = self.packed.tolist()                                      # the step's one host sync
            n, K = out[0], self.k
            self.req.append(out[K + 2:], n, out[1 + n])                     # drafts, accepted, choice[n]

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos: tuple[int, ...] = (),
                 time_split: bool = True) -> SpecResult:
        need = len(prompt_ids) + max_new_tokens + self.k + 1
        if need > self.max_len:
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({max_new_tokens}) "
                             f"+ K+1 ({self.k + 1}) = {need} exceeds the static cache of {self.max_len} positions: "
                             f"pass max_len >= {need}")
        req = Request(list(prompt_ids), max_new_tokens, eos, self.k if self.drafter is not None else 0)
        timer = StepTimer(events=self.device.type == "cuda" and time_split)
        with timer("prefill"):
            self.prefill(req)
        while not req.done:
            self.step(timer)
        return req.result(timer.times, engine="fast", graphs=self.verify.captured, graph_note=self.reason,
                          compiled=self.verify.compiled, compile_s=self.compile_s)


_ENGINES: "weakref.WeakKeyDictionary[Target, dict]" = weakref.WeakKeyDictionary()


def fast_engine(target: Target, method: str, drafter: Eagle3Drafter | None, k: int,
                config: FastConfig = FastConfig()) -> FastEngine:
    """The engine for this (method, drafter, K) and config, built (its steps compiled and captured) on first
    use; ``config`` is resolved here if it is not already."""
    drafter = drafter if method != "ar" else None
    k = k if method != "ar" else 0
    config = config.resolve(target, (drafter,))
    table = _ENGINES.setdefault(target, {})
    key = (method, id(drafter), k, config)         # the engine holds the drafter, so id() stays unique
    if key not in table:
        table[key] = FastEngine(target, method, drafter, k, config)
    return table[key]


@torch.inference_mode()       # capture and warm-up too: no autograd state in any static buffer
def generate_fast(target: Target, prompt_ids: list[int], *, method: str = "peagle",
                  drafter: Eagle3Drafter | None = None, k: int = 5, max_new_tokens: int = 128,
                  temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
                  stop_at_eos: bool = True, time_split: bool = True,
                  config: FastConfig | None = None, **options) -> SpecResult:
    """:func:`peagle_lab.engines.teaching.generate` over static caches and captured steps (greedy).

    ``config`` (or its fields as keywords: ``max_len``, ``capture``, ``compile``, ``attention``,
    ``prompt_graphs``; :class:`~peagle_lab.engines.fast.config.FastConfig`): one cache and one set of
    graphs per resolved config, so keep it fixed across prompts (``max_len`` defaults to 2048). The first
    call per configuration pays the compile (``stats["compile_s"]``). ``time_split=False`` skips the CUDA
    events. ``temperature > 0`` falls back to the teaching engine.
    """
    config = config if config is not None else FastConfig(**options)
    if temperature > 0:
        out = generate(target, prompt_ids, method=method, drafter=drafter, k=k, max_new_tokens=max_new_tokens,
                       temperature=temperature, top_p=top_p, seed=seed, stop_at_eos=stop_at_eos)
        out.stats["engine"] = "teaching (the fast engine is greedy only; sampling falls back)"
        return out
    k = check_request(target, prompt_ids, max_new_tokens, method=method, drafter=drafter, k=k,
                      temperature=temperature, top_p=top_p)
    if k and drafter.fc.weight.device != target.device:
        raise ValueError(f"drafter is on {drafter.fc.weight.device}, target on {target.device}: "
                         "move it with drafter.to(target.device) (load_drafter(path, target) does)")
    engine = fast_engine(target, method, drafter, k, config)
    return engine.generate(prompt_ids, max_new_tokens, target.eos_token_ids if stop_at_eos else (), time_split)
