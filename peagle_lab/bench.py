"""``peagle-lab bench``: tokens/s and acceptance of ar / hf / eagle / peagle on one target.

Fairness rules (DESIGN.md): the first N prompts in file order, one chat template, one token
budget; one warm-up generation per configuration; configurations interleaved per prompt (per
round of prompts when batching) so machine noise hits all alike; tokens/s = generated tokens /
wall time including prefill. ``--batch-size B`` runs B requests at once through the batched
engine; tokens/s then counts all of them over the batch's wall time.

Engines (batch 1, greedy): ``teaching`` is :func:`peagle_lab.engines.teaching.generate`, the readable loop;
``fast`` is :func:`peagle_lab.engines.fast.generate_fast` (static caches, CUDA graphs), whose rows add a
per-step time split (target verify, drafting, host) and, on CUDA, the launch and memory floors.
``auto`` picks fast on CUDA and teaching on the CPU: on a CPU the verify forward dominates and
the teaching engine is what the notebooks explain; on a GPU the teaching engine only measures
Python launch overhead. Rows with B > 1 always run the batched teaching engine
(:func:`peagle_lab.engines.batched.generate_batch`; the fast engine is batch 1) and say so:
``"engine": "teaching-batched"``.

``run_bench(BenchSpec(...), FastConfig(...))``: what to measure, and how the fast engine runs.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

import torch

from .checkpoint import load_drafter
from .device import DTYPES, resolve_device
from .drafters_registry import shipped
from .engines.fast import FastConfig
from .engines.fast.engine import fast_engine
from .engines.fast.graphs import H200_HBM_BYTES_PER_S, launch_floor_us, memory_floor_ms
from .engines.protocol import Engine, make_engine
from .engines.request import Outputs, SpecResult
from .engines.timing import StepTimes
from .prompts import load_prompts
from .stats import AcceptanceStats
from .target import Generation, Target

BENCH_METHODS = ("ar", "hf", "eagle", "peagle", "dspark")
ENGINES = ("auto", "teaching", "fast")
DEFAULT_DRAFTERS = {"eagle": "eagle-smollm2", "peagle": "peagle-smollm2", "dspark": "dspark-smollm2"}


@dataclass
class BenchSpec:
    """What one bench measures: methods x K x batch sizes on the first ``num_prompts`` of ``prompts``.

    ``drafters``: ``{method: checkpoint dir}`` (default: the shipped drafters of the default target).
    ``batch_sizes``: for each B, rows run consecutive groups of B prompts as one batch
    (:func:`peagle_lab.engines.batched.generate_batch`; B = 1 is the single-request engine), and
    tokens/s counts every request's tokens over the batch's wall time. Prompts are visited in
    rounds of ``lcm(batch_sizes)`` so every configuration sees the same prompts at about the same
    time. With B > 1, identical_to_ar compares each request with single-request AR (for the batched
    ``ar`` row too). ``engine``: see the module docstring (B > 1 always uses the batched engine).
    ``keep_going``: a configuration that raises gets its ``error`` recorded and is skipped from then on,
    the rest run on. ``time_budget_s``: start no new round of prompts this long after the call began
    (loading and warm-up included; rows then report the prompts actually run; the first round always
    runs). ``hbm_bytes_per_s``: bandwidth for the memory floor (H200: 4.8 TB/s).
    """
    methods: tuple | list = ("ar", "eagle", "peagle")
    ks: tuple | list = (3,)
    prompts: str = "mt-bench"
    num_prompts: int = 10
    max_new_tokens: int = 64
    temperature: float = 0.0
    seed: int = 0
    batch_sizes: tuple | list = (1,)
    spread: bool = False
    engine: str = "auto"
    target_name: str | None = None
    device: str = "auto"
    dtype: str = "float32"
    drafters: dict = field(default_factory=dict)
    keep_going: bool = False
    time_budget_s: float | None = None
    hbm_bytes_per_s: float = H200_HBM_BYTES_PER_S

    def __post_init__(self):
        """Refuse what the bench cannot run where the spec is written (as FastConfig does), naming the fix;
        ``batch_sizes`` comes out sorted, each once."""
        self.batch_sizes = _checked_batch_sizes(self.methods, self.batch_sizes, self.temperature, self.dtype)
        if self.engine not in ENGINES:
            raise BenchRefused(f"unknown engine {self.engine!r}; choose from {', '.join(ENGINES)}")


@torch.inference_mode()
def hf_generate(target: Target, prompt_ids: list[int], max_new_tokens: int, *, temperature: float = 0.0,
                top_p: float = 1.0, seed: int | None = None) -> Generation:
    """transformers' own ``generate`` on the same model (the ``hf`` baseline)."""
    if seed is not None:
        torch.manual_seed(seed)
    sampling = (dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0) if temperature > 0
                else dict(do_sample=False))
    t0 = time.perf_counter()
    ids = torch.tensor([prompt_ids], device=target.device)
    eos = target.eos_token_ids
    out = target.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, **sampling,
                                eos_token_id=list(eos), pad_token_id=eos[0] if eos else None)
    return Generation(tokens=out[0, len(prompt_ids):].tolist(), prompt_len=len(prompt_ids),
                      seconds=time.perf_counter() - t0)


@dataclass
class HF:
    """The ``hf`` baseline as an :class:`~peagle_lab.engines.protocol.Engine`: :func:`hf_generate` per prompt."""
    target: Target
    temperature: float = 0.0
    top_p: float = 1.0
    name = "hf"

    def generate(self, prompts: list[list[int]], max_new_tokens: int, seed: int | None = None) -> Outputs:
        outs = [hf_generate(self.target, ids, max_new_tokens, temperature=self.temperature, top_p=self.top_p, seed=seed)
                for ids in prompts]
        return Outputs([SpecResult(tokens=o.tokens, prompt_len=o.prompt_len, seconds=o.seconds) for o in outs],
                       sum(o.seconds for o in outs))


@dataclass
class _Row:
    """One configuration (method, K, batch size) and what it has measured so far."""
    method: str
    k: int | None
    batch_size: int = 1
    tokens: int = 0
    seconds: float = 0.0
    stats: AcceptanceStats | None = None
    identical: bool | None = None
    identical_prompts: int = 0
    times: dict = field(default_factory=lambda: {"prefill": 0.0, "draft": 0.0, "verify": 0.0, "bookkeeping": 0.0})
    steps: int = 0
    warmup_s: float = 0.0
    error: str | None = None

    def add(self, toks: list[list[int]], seconds: float, accs: list, split: StepTimes | None) -> None:
        """Count one run: its tokens, wall time, acceptance (per request) and time split."""
        self.tokens += sum(len(t) for t in toks)
        self.seconds += seconds
        for acc in accs:
            if acc is not None:
                self.stats = self.stats.merge(acc)
        for key, value in (split.to_dict().items() if split is not None else ()):
            self.times[key] += value

    def compare(self, toks: list[list[int]], idx: list[int], reference: dict[int, list[int]]) -> None:
        """identical_to_ar: were the outputs for prompts ``idx`` AR's own, token for token?"""
        same = [t == reference[i] for t, i in zip(toks, idx)]
        self.identical_prompts += sum(same)
        self.identical = all(same) if self.identical is None else (self.identical and all(same))


class BenchRefused(ValueError):
    """A benchmark asked for what it cannot run; the message names the fix (one line from the CLI, exit 2)."""


def resolve_engine(engine: str, device: str) -> str:
    if engine not in ENGINES:
        raise BenchRefused(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if engine == "auto":
        return "fast" if str(device).startswith("cuda") else "teaching"
    return engine


def resolve_drafter(method: str, path: str | None, target_is_default: bool) -> str:
    if path:
        return path
    name = DEFAULT_DRAFTERS[method]
    if target_is_default and name in shipped():
        return str(shipped()[name])
    raise BenchRefused(f"method {method!r} needs a drafter: no shipped drafter {name!r} for this target; pass "
                       f"--drafter {method}=DIR")


def _groups(n: int, size: int) -> list[list[int]]:
    return [list(range(i, min(i + size, n))) for i in range(0, n, size)]


@dataclass
class _Runner:
    """What every configuration of one bench call shares: the target, the drafters, the engine and the budget."""
    target: Target
    drafters: dict
    engine: str
    max_new_tokens: int
    temperature: float
    config: FastConfig                          # the fast engine's, resolved
    keep_going: bool = False

    def fast(self, row: _Row) -> bool:
        """Rows the fast engine runs: batch 1, greedy (sampling stays on the teaching engine); it has no DSpark
        path, so DSpark rows run on the teaching engine and say so."""
        return (self.engine == "fast" and row.batch_size == 1 and row.method not in ("hf", "dspark")
                and self.temperature <= 0)

    def engine_for(self, row: _Row) -> Engine:
        """The engine a row runs: batched for B > 1, else fast or teaching (see :meth:`fast`), or hf."""
        if row.method == "hf":
            return HF(self.target, self.temperature)
        name = "batched" if row.batch_size > 1 else "fast" if self.fast(row) else "teaching"
        options = {"config": self.config} if name == "fast" else {}
        return make_engine(name, self.target, row.method, self.drafters.get(row.method), row.k or 1,
                           temperature=self.temperature, **options)

    def run(self, row: _Row, batch: list[list[int]], seed: int, budget: int | None = None):
        """-> (token lists, wall seconds, acceptance per request, time split)"""
        out = self.engine_for(row).generate(batch, budget or self.max_new_tokens, seed)
        if self.fast(row):                      # per speculative step (per token for AR)
            row.steps += sum(len(r.steps) if r.acceptance is not None else len(r.tokens) for r in out.results)
        return [r.tokens for r in out.results], out.seconds, [r.acceptance for r in out.results], out.times

    def attempt(self, row: _Row, batch: list[list[int]], seed: int, budget: int | None = None):
        """run(), or with keep_going: None after recording the row's first error."""
        if row.error is not None:
            return None
        try:
            return self.run(row, batch, seed, budget)
        except Exception as err:  # noqa: BLE001 -- recorded per configuration, the others go on
            if not self.keep_going:
                raise
            row.error = f"{type(err).__name__}: {err}"
            print(f"bench: {row.method} k={row.k} failed: {row.error}", file=sys.stderr)
            return None

    def warm_up(self, rows: list[_Row], prompts: list[list[int]], batch: int, seed: int) -> None:
        """One short generation (or batch of the first ``batch`` prompts) per configuration, discarded (it compiles
        and captures the fast engine's steps; ``row.warmup_s`` keeps how long that took); with prompt graphs,
        one token from a prompt of every bucket the run will meet (each bucket's graph is captured here)."""
        warm = [ids[:64] for ids in prompts[:batch]]
        for row in rows:
            t0 = time.perf_counter()
            self.attempt(row, warm[: row.batch_size], seed, budget=min(self.max_new_tokens, 16))
            if self.fast(row) and row.error is None:
                engine = fast_engine(self.target, row.method, self.drafters.get(row.method), row.k or 0, self.config)
                if buckets := engine.prompt_buckets(prompts):
                    self.attempt(row, buckets, seed, budget=1)
            row.steps, row.warmup_s = 0, time.perf_counter() - t0

    def untimed_ar(self, prompts: dict[int, list[int]]) -> dict[int, list[int]]:
        """Greedy AR output of ``{index: prompt}``, untimed (identical_to_ar needs it when no ar row ran);
        with keep_going a failure leaves ``{}`` (identical_to_ar stays null)."""
        options = {"config": self.config} if self.engine == "fast" else {}
        ar = make_engine(self.engine, self.target, "ar", **options)
        try:
            out = ar.generate(list(prompts.values()), self.max_new_tokens)
            return dict(zip(prompts, (r.tokens for r in out.results)))
        except Exception as err:  # noqa: BLE001
            if not self.keep_going:
                raise
            print(f"bench: AR reference failed ({err}); identical_to_ar stays null", file=sys.stderr)
            return {}


def _bench_round(runner: _Runner, rows: list[_Row], group: list[int], prompt_ids: list[list[int]], seed: int) -> None:
    """Every configuration on the round's prompts ``group``, in turn. At T=0 the single-request ar row runs
    first: its output (timed) is the reference the other rows must equal."""
    greedy = runner.temperature <= 0
    single_ar = next((r for r in rows if r.method == "ar" and r.batch_size == 1), None)
    reference = {}
    if greedy:
        prompts = [prompt_ids[i] for i in group]
        got = runner.attempt(single_ar, prompts, seed + group[0]) if single_ar is not None else None
        if got is not None:
            single_ar.add(*got)
            reference = dict(zip(group, got[0]))
        else:
            reference = runner.untimed_ar({i: prompt_ids[i] for i in group})
    for row in rows:
        if row is single_ar and greedy:
            continue
        for chunk in _groups(len(group), row.batch_size):
            idx = [group[j] for j in chunk]
            got = runner.attempt(row, [prompt_ids[i] for i in idx], seed + idx[0])
            if got is None:
                break
            row.add(*got)
            if greedy and reference and (row.method != "ar" or row.batch_size > 1):
                row.compare(got[0], idx, reference)


def _bench_rounds(runner: _Runner, rows: list[_Row], prompt_ids: list[list[int]], round_size: int, seed: int, *,
                  started: float, time_budget_s: float | None, progress: bool) -> int:
    """Rounds of ``round_size`` prompts until all ran or the time budget is spent; -> prompts run."""
    done = 0
    for group in tqdm(_groups(len(prompt_ids), round_size), desc="bench rounds", disable=not progress, file=sys.stderr):
        if done and time_budget_s is not None and time.perf_counter() - started > time_budget_s:
            print(f"bench: time budget {time_budget_s:.0f} s spent after {done} prompts", file=sys.stderr)
            break
        done += len(group)
        _bench_round(runner, rows, group, prompt_ids, seed)
    return done


def _row_result(runner: _Runner, row: _Row, num_prompts: int) -> dict:
    """One row of the JSON: a configuration's tokens/s, acceptance, identity to AR and time split."""
    engine = ("fast" if runner.fast(row) else "hf" if row.method == "hf"
              else "teaching-batched" if row.batch_size > 1 else "teaching")
    out = {
        "method": row.method, "k": row.k, "batch_size": row.batch_size, "engine": engine,
        "tokens_per_s": row.tokens / row.seconds if row.seconds else 0.0,
        "acceptance_length": row.stats.acceptance_length if row.stats else None,
        "acceptance_per_position": row.stats.per_position if row.stats else None,
        "conditional_acceptance": row.stats.conditional if row.stats else None,
        "identical_to_ar": row.identical,
        "identical_prompts": row.identical_prompts if row.identical is not None else None,
        "num_prompts": num_prompts, "new_tokens": row.tokens, "seconds": row.seconds,
        "time_split_s": row.times if (row.stats or engine == "fast") else None,
        "warmup_s": row.warmup_s,
    }
    if engine == "fast":                       # per speculative step (per token for AR), milliseconds
        per = 1e3 / row.steps if row.steps else 0.0
        out["step_split_ms"] = {"steps": row.steps, "verify": row.times["verify"] * per,
                                "draft": row.times["draft"] * per, "host": row.times["bookkeeping"] * per}
        # the prompt's pass runs eagerly (its length varies): how much of the wall it takes, and the rate after it
        decode_s = row.seconds - row.times["prefill"]
        out["prefill_ms_per_prompt"] = 1e3 * row.times["prefill"] / num_prompts if num_prompts else None
        out["decode_tokens_per_s"] = row.tokens / decode_s if decode_s > 0 else None
    if row.error is not None:
        out["error"] = row.error
    return out


def _checked_batch_sizes(methods, batch_sizes, temperature: float, dtype: str) -> list[int]:
    """The sorted batch sizes, after refusing what the bench cannot run (naming the fix)."""
    bad = [m for m in methods if m not in BENCH_METHODS]
    if bad:
        raise BenchRefused(f"unknown method(s) {bad}; choose from {', '.join(BENCH_METHODS)}")
    batch_sizes = sorted(set(int(b) for b in batch_sizes))
    if not batch_sizes or batch_sizes[0] < 1:
        raise BenchRefused(f"--batch-size must be integers >= 1, got {batch_sizes}")
    if batch_sizes[-1] > 1 and temperature > 0:
        raise BenchRefused("batched decoding is greedy only: use --temperature 0 with --batch-size > 1, "
                         "or --batch-size 1 for sampling")
    if batch_sizes[-1] > 1 and "hf" in methods:
        raise BenchRefused("the hf baseline runs one prompt at a time: drop hf from --methods or use --batch-size 1")
    if dtype not in DTYPES:
        raise BenchRefused(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    return batch_sizes


def _load_drafters(spec: BenchSpec, target: Target) -> dict:
    """``{method: drafter}`` for the speculative methods asked for, in the target's dtype."""
    dtype = next(target.model.parameters()).dtype
    default_target = spec.target_name in (None, "smollm2")
    return {m: load_drafter(resolve_drafter(m, spec.drafters.get(m), default_target), target, dtype=dtype)
            for m in DEFAULT_DRAFTERS if m in spec.methods}


def _engine_for(spec: BenchSpec, fast: FastConfig, target: Target) -> str:
    """The engine the single-request rows run, after refusing fast-engine options it would not use."""
    engine = resolve_engine(spec.engine, str(target.device))
    if engine != "fast" and fast.compile:
        raise BenchRefused(f"compile fuses the fast engine's steps, but this bench runs the {engine} engine: "
                         "add --engine fast (or drop --compile)")
    if engine != "fast" and fast.attention == "triton":
        raise BenchRefused(f"--attention triton picks the fast engine's attention, but this bench runs the {engine} "
                         "engine: add --engine fast (or drop --attention)")
    return engine


def run_bench(spec: BenchSpec, fast: FastConfig = FastConfig(), *, target: Target | None = None,
              progress: bool = True) -> dict:
    """Run the benchmark ``spec`` and return the JSON-ready result (``{"results": [...], ...}``).

    ``fast``: how the fast engine runs (:class:`~peagle_lab.engines.fast.config.FastConfig`), resolved
    here once for this target and drafters; its ``max_len`` defaults to the longest prompt +
    max_new_tokens + max K + 1. ``target``: an already loaded target (else ``spec.target_name``).
    """
    started = time.perf_counter()
    batch_sizes = spec.batch_sizes
    target = target or Target.load(spec.target_name, dtype=DTYPES[spec.dtype], device=resolve_device(spec.device))
    engine = _engine_for(spec, fast, target)
    drafters = _load_drafters(spec, target)
    rows = [_Row(m, k, b, stats=AcceptanceStats(k) if k else None)
            for b in batch_sizes for m in spec.methods for k in (spec.ks if m in drafters else [None])]
    prompt_ids = [target.chat_ids(p) for p in load_prompts(spec.prompts, spec.num_prompts, spread=spec.spread)]
    if not prompt_ids:
        raise BenchRefused(f"no prompts in {spec.prompts}")
    if engine == "fast" and spec.temperature > 0:
        print(f"bench: the fast engine decodes greedily only, so at --temperature {spec.temperature} every row runs "
              "the teaching engine (each row records the engine it ran)", file=sys.stderr)
    if len(prompt_ids) < batch_sizes[-1]:
        print(f"bench: only {len(prompt_ids)} prompts, so --batch-size {batch_sizes[-1]} decodes "
              f"{len(prompt_ids)} at once", file=sys.stderr)
    fit = max(len(p) for p in prompt_ids) + spec.max_new_tokens + max(spec.ks, default=1) + 1
    config = fast.resolve(target, drafters.values(), fit=fit)          # auto -> what runs here, recorded below
    runner = _Runner(target, drafters, engine, spec.max_new_tokens, spec.temperature, config, spec.keep_going)
    runner.warm_up(rows, prompt_ids, batch_sizes[-1], spec.seed)
    done = _bench_rounds(runner, rows, prompt_ids, math.lcm(*batch_sizes), spec.seed, started=started,
                         time_budget_s=spec.time_budget_s, progress=progress)
    on_fast = engine == "fast"
    settings = {"prompts": str(spec.prompts), "num_prompts": len(prompt_ids), "spread": spec.spread,
                "max_new_tokens": spec.max_new_tokens, "temperature": spec.temperature, "methods": list(spec.methods),
                "k": list(spec.ks), "batch_size": batch_sizes, "engine": engine, "device": str(target.device),
                "dtype": str(next(target.model.parameters()).dtype).removeprefix("torch."),
                "max_len": config.max_len if on_fast else None,
                "compile": (config.compile if on_fast else None) or False,
                "attention": config.attention if on_fast else None,
                "prompt_graphs": config.prompt_graphs if on_fast else None}
    if len(prompt_ids) != spec.num_prompts:            # the set held fewer: the record says what ran
        settings["num_prompts_asked"] = spec.num_prompts
    out = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.node()} {platform.machine()}", "target": target.name, "settings": settings,
           "results": [_row_result(runner, row, done) for row in rows]}
    if on_fast and target.device.type == "cuda":
        out["floors"] = floors(target, drafters, config, min(spec.ks, default=1), spec.hbm_bytes_per_s)
    return out


def floors(target: Target, drafters: dict, config: FastConfig, k: int = 1,
           hbm_bytes_per_s: float = H200_HBM_BYTES_PER_S) -> dict:
    """What a step cannot beat on this GPU: one empty graph launch, and reading the weights once."""
    weights = fast_engine(target, "ar", None, 0, config).weight_bytes()["target"]      # the run's own engines
    drafter_bytes = {m: fast_engine(target, m, d, k, config).weight_bytes()["drafter"] for m, d in drafters.items()}
    return {"launch_us": launch_floor_us(target.device), "hbm_bytes_per_s": hbm_bytes_per_s,
            "target_weight_bytes": weights, "target_memory_floor_ms": memory_floor_ms(weights, hbm_bytes_per_s),
            "drafter_weight_bytes": drafter_bytes,
            "drafter_memory_floor_ms": {m: memory_floor_ms(b, hbm_bytes_per_s) for m, b in drafter_bytes.items()},
            "note": "memory floor = weight bytes / bandwidth: the least time one forward can take at batch 1; "
                    "launch floor = replaying an empty captured CUDA graph"}


def write_json(result: dict, path: str | None) -> None:
    """Print the result, then write it to ``path`` (whole or not at all): a file that cannot be written never
    costs the result of a long run, which is on stdout already."""
    from .atomic import atomic_file

    text = json.dumps(result, indent=2)
    print(text, flush=True)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as tmp:
            tmp.write_text(text + "\n")
            tmp.chmod(0o644)                 # readable like any file written the plain way
