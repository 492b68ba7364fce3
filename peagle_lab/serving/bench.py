"""``peagle-lab vllm-bench``: tokens/s and acceptance of ar / eagle / peagle in real vLLM,
swept over K and concurrency. ``ar`` is plain decoding (no speculation), as in ``peagle-lab bench``.

How a sweep runs
* One vLLM server per (method, K) (:class:`~.server.VLLMServer`), reused for every concurrency;
  warmed up untimed with every prompt once at the top concurrency and short replies (on a GPU the
  first requests of each prefill length compile kernels).
* Load comes from vLLM's own ``vllm bench serve`` (:mod:`.bench_serve`; one client process per
  server runs every concurrency in turn, reading the counters around each run) with a custom JSONL
  dataset holding the first N prompts in file order (``--disable-shuffle``, no oversampling).
  The prompts are rendered by the target's chat template exactly as ``Target.chat_ids`` renders
  them for ``peagle-lab bench`` and sent with ``add_special_tokens: false``, so vLLM sees the same
  token ids. Same token budget M; generation stops at EOS as ``bench`` does (no ``--ignore-eos``);
  temperature T (0 = greedy) with top-p 1 and no top-k, as ``bench``.
* ``--max-concurrency C`` caps the requests in flight; all N requests are queued at once.

What each row reports, and where it comes from
* ``tokens_per_s``: vLLM bench's output throughput, generated tokens / wall time of the run
  (first request sent to last token received: prefill included, like ``bench``).
* ``acceptance_length``, ``acceptance_per_position``, ``conditional_acceptance``: vLLM's
  Prometheus spec-decode counters read before and after the run (:mod:`.metrics`), with vLLM's
  definitions. ``vllm_bench_acceptance_length`` is vLLM bench's own reading of the same counters.
* ``identical_to_ar``: ``vllm bench serve`` returns each request's generated text
  (``--save-detailed``) and completion-token count, not token ids. At T=0 a row is ``true`` when
  every prompt's text and token count equal those of the ``ar`` run at the same concurrency
  (``mismatched_prompts`` lists the prompt indices that differ); ``null`` at T > 0, for the
  ``ar`` rows themselves, and when ``ar`` was not among the methods.

Unlike ``bench``, configurations cannot be interleaved per prompt (each needs its own server), so
machine noise is not spread evenly: on a shared machine, repeat a sweep before trusting small gaps.
"""
from __future__ import annotations

import datetime as _dt
import importlib.metadata as _md
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from tqdm.auto import tqdm

from ..device import half_dtype
from .metrics import acceptance_from_diff
from .server import VLLM_INSTALL, ServeConfig, VLLMServer, check_drafter_config, is_hub_id

VLLM_METHODS = ("ar", "eagle", "peagle", "dspark")
# vLLM's own refusal on its CPU build (0.32): DSpark runs only on the V2 model runner, which needs Triton's CPU
# backend (triton-cpu), not on PyPI. Recorded in benchmarks/results/vllm_cpu_dspark_refusal.json.
DSPARK_ON_CPU = ("vLLM's CPU build cannot serve dspark: its V1 model runner says 'Model Runner V1 does not support: "
                 "dspark speculative decoding' and its V2 runner needs triton-cpu. Serve dspark on a CUDA GPU "
                 "(vLLM 0.26-0.34), or measure it on this machine with peagle-lab bench --methods dspark")
WARMUP_TOKENS = 8
BENCH_SERVE = [sys.executable, "-m", "peagle_lab.serving.bench_serve"]   # `vllm bench serve` in this Python


# ----------------------------------------------------------------------------- inputs
def render_prompts(tokenizer, prompts: list[str]) -> tuple[list[str], bool]:
    """``(texts, add_special_tokens)`` such that tokenizing each text with that flag gives exactly
    ``Target.chat_ids(prompt)``: the chat-templated text without extra special tokens, or, for a
    tokenizer without a chat template, the raw prompt with them."""
    if getattr(tokenizer, "chat_template", None):
        return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                              add_generation_prompt=True) for p in prompts], False
    return list(prompts), True


def write_dataset(texts: list[str], path: str | os.PathLike, max_new_tokens: int) -> Path:
    """vLLM bench's custom JSONL format, one ``{"prompt": ..., "output_tokens": M}`` per line, in order."""
    path = Path(path)
    with open(path, "w", encoding="utf-8") as handle:
        for text in texts:
            handle.write(json.dumps({"prompt": text, "output_tokens": max_new_tokens}) + "\n")
    return path


def bench_serve_args(*, base_url: str, model: str, dataset: str | os.PathLike, num_prompts: int,
                     max_new_tokens: int, concurrency: int, temperature: float, result_dir: str | os.PathLike,
                     result_name: str, add_special_tokens: bool = False, seed: int = 0) -> list[str]:
    """The arguments of ``vllm bench serve`` for one run (run them with :data:`BENCH_SERVE`)."""
    return ["--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", model,
            "--dataset-name", "custom", "--dataset-path", str(dataset), "--num-prompts", str(num_prompts),
            "--disable-shuffle", "--no-oversample", "--skip-chat-template",   # rendered by render_prompts
            "--custom-output-len", str(max_new_tokens),
            "--max-concurrency", str(concurrency), "--request-rate", "inf",
            "--temperature", repr(float(temperature)), "--top-p", "1.0", "--top-k", "0",
            "--extra-body", json.dumps({"add_special_tokens": add_special_tokens}),
            "--save-result", "--save-detailed", "--result-dir", str(result_dir), "--result-filename", result_name,
            "--seed", str(seed), "--disable-tqdm"]


def serving_defaults(cuda: bool, methods) -> dict:
    """What a sweep uses where the user did not say, chosen from the device.

    On a CUDA GPU: 16-bit weights (bf16, or fp16 on a GPU without bf16 such as a T4: ``device.half_dtype``),
    CUDA graphs (no ``--enforce-eager``), a longer start-up timeout (compile and capture take minutes) and, when
    P-EAGLE is swept, vLLM's V1 model runner for every method: vLLM 0.26 runs parallel drafting only on V1 while
    it serves the others on V2, and V1 alone halved EAGLE-3's tokens/s on an H200
    (``benchmarks/results/vllm_cuda_h200_sweep.json``), so mixed runners would compare runners, not
    drafting. On a CPU: float32, eager, vLLM's own runner.

    >>> serving_defaults(True, ["ar", "peagle"])["model_runner"], serving_defaults(False, ["ar"])["dtype"]
    ('v1', 'float32')
    """
    if not cuda:
        return dict(dtype="float32", enforce_eager=True, memory_fraction=0.35, startup_timeout=600.0,
                    model_runner="auto")
    return dict(dtype=half_dtype(), enforce_eager=False, memory_fraction=0.35, startup_timeout=1200.0,
                model_runner="v1" if "peagle" in methods else "auto")


def serving_settings(methods, device: str = "auto", **given) -> dict:
    """The sweep's server settings: :func:`serving_defaults` for ``device`` (``auto``: CUDA when torch sees a
    GPU), with every setting ``given`` that is not None over them -- what the CLI and a notebook both get.

    >>> serving_settings(["ar"], "cpu", dtype="bfloat16")["dtype"], serving_settings(["ar"], "cpu")["enforce_eager"]
    ('bfloat16', True)
    """
    import torch

    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    return {**serving_defaults(cuda, methods), **{k: v for k, v in given.items() if v is not None}}


def validate(methods, ks, concurrency, num_prompts: int, max_new_tokens: int) -> None:
    """Refuse bad sweep settings with a message naming the fix."""
    bad = [m for m in methods if m not in VLLM_METHODS]
    if bad:
        hint = " (no speculation is 'ar', as in peagle-lab bench)" if "none" in bad else ""
        raise ValueError(f"unknown method(s) {bad}{hint}; choose from {', '.join(VLLM_METHODS)}")
    if not methods:
        raise ValueError("no methods given; pass e.g. --methods ar,eagle,peagle")
    if any(m != "ar" for m in methods) and (not ks or min(ks) < 1):
        raise ValueError(f"--k must list draft lengths >= 1, e.g. 3,5,7 (got {ks})")
    if not concurrency or min(concurrency) < 1:
        raise ValueError(f"--concurrency must list values >= 1, e.g. 1,4 (got {concurrency})")
    if num_prompts < 1 or max_new_tokens < 1:
        raise ValueError("--num-prompts and --max-new-tokens must be at least 1")


# ----------------------------------------------------------------------------- outputs
def make_row(method: str, k: int | None, concurrency: int, saved: dict, counters: dict[str, float]) -> dict:
    """One JSON row (``bench``'s fields plus concurrency and engine) from vLLM bench's saved result
    and the spec-decode counter diff around the run."""
    stats = acceptance_from_diff(counters, k) if method != "ar" else None
    if stats is not None and stats.num_drafts == 0:
        stats = None                           # nothing was drafted: no acceptance to report
    return {"method": method, "k": k if method != "ar" else None, "concurrency": concurrency, "engine": "vllm",
            "tokens_per_s": float(saved["output_throughput"]),
            "acceptance_length": stats.acceptance_length if stats else None,
            "acceptance_per_position": stats.per_position if stats else None,
            "conditional_acceptance": stats.conditional if stats else None,
            "identical_to_ar": None,
            "num_prompts": int(saved["completed"]), "new_tokens": int(saved["total_output_tokens"]),
            "seconds": float(saved["duration"]), "time_split_s": None,
            "num_drafts": stats.num_drafts if stats else None,
            "vllm_bench_acceptance_length": saved.get("spec_decode_acceptance_length"),
            "mean_ttft_ms": saved.get("mean_ttft_ms"), "mean_tpot_ms": saved.get("mean_tpot_ms")}


def mark_identical(rows: list[dict], outputs: list[tuple[list[str], list[int]]], greedy: bool) -> None:
    """Fill ``identical_to_ar`` (and ``mismatched_prompts``) against the ``ar`` run at the same concurrency."""
    if not greedy:
        return
    reference = {r["concurrency"]: out for r, out in zip(rows, outputs) if r["method"] == "ar"}
    for row, (texts, lens) in zip(rows, outputs):
        ref = reference.get(row["concurrency"])
        if row["method"] == "ar" or ref is None:
            continue
        ref_texts, ref_lens = ref
        bad = [i for i in range(max(len(texts), len(ref_texts)))
               if i >= len(texts) or i >= len(ref_texts) or texts[i] != ref_texts[i] or lens[i] != ref_lens[i]]
        row["identical_to_ar"] = not bad
        row["mismatched_prompts"] = bad


def best_by_concurrency(rows: list[dict]) -> list[dict]:
    """Per concurrency: tokens/s without speculation and of each speculative method at its best K,
    with the ratios the P-EAGLE blog reports (method / ar, P-EAGLE / EAGLE-3). Sweeps recorded before the
    baseline was renamed call it ``none``; their rows count as ``ar``.

    >>> rows = [dict(method="ar", k=None, concurrency=1, tokens_per_s=10.0, acceptance_length=None),
    ...         dict(method="peagle", k=3, concurrency=1, tokens_per_s=12.0, acceptance_length=1.4),
    ...         dict(method="peagle", k=5, concurrency=1, tokens_per_s=15.0, acceptance_length=1.6)]
    >>> best_by_concurrency(rows)[0]["peagle_k"], best_by_concurrency(rows)[0]["peagle_x_ar"]
    (5, 1.5)
    """
    table = []
    for c in sorted({r["concurrency"] for r in rows}):
        here = [r for r in rows if r["concurrency"] == c]
        base = next((r["tokens_per_s"] for r in here if r["method"] in ("ar", "none")), None)
        entry = {"concurrency": c, "ar": base}
        for m in ("eagle", "peagle"):
            runs = [r for r in here if r["method"] == m]
            if runs:
                best = max(runs, key=lambda r: r["tokens_per_s"])
                entry.update({m: best["tokens_per_s"], f"{m}_k": best["k"], f"{m}_al": best["acceptance_length"],
                              f"{m}_x_ar": best["tokens_per_s"] / base if base else None})
        if "eagle" in entry and "peagle" in entry:
            entry["peagle_x_eagle"] = entry["peagle"] / entry["eagle"]
        table.append(entry)
    return table


# ----------------------------------------------------------------------------- running
def run_loads(server: VLLMServer, *, dataset: Path, num_prompts: int, max_new_tokens: int, concurrency: list[int],
              temperature: float, add_special_tokens: bool, workdir: Path, seed: int = 0,
              timeout_s: float = 3600.0) -> list[tuple[dict, dict[str, float]]]:
    """Run ``vllm bench serve`` once per concurrency against ``server`` (one client process, see
    :mod:`.bench_serve`); return each run's saved result and spec-decode counter diff."""
    tag = f"{server.cfg.method}-k{server.cfg.k if server.cfg.method != 'ar' else 0}"
    plan = []
    for c in concurrency:
        name = f"{tag}-c{c}"
        argv = bench_serve_args(base_url=server.url, model=str(server.cfg.target), dataset=dataset,
                                   num_prompts=num_prompts, max_new_tokens=max_new_tokens, concurrency=c,
                                   temperature=temperature, result_dir=workdir, result_name=name + ".json",
                                   add_special_tokens=add_special_tokens, seed=seed)
        plan.append({"argv": argv, "metrics_url": server.url + "/metrics",
                     "counters_out": str(workdir / (name + ".counters.json"))})
    plan_path = workdir / (tag + ".plan.json")
    plan_path.write_text(json.dumps(plan, indent=1))
    # The load generator only tokenizes and streams; one thread keeps it off the server's cores.
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_LOGGING_LEVEL=os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"))
    log = workdir / (tag + ".bench.log")
    with open(log, "w") as handle:             # run() kills the client on any exception (also ^C)
        rc = subprocess.run(BENCH_SERVE + ["--plan", str(plan_path)],
                            stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            timeout=timeout_s).returncode
    if rc != 0:
        raise RuntimeError(f"vllm bench serve exited with code {rc}; log {log}:\n" + log.read_text()[-3000:])
    out = []
    for c, run in zip(concurrency, plan):
        saved = json.loads((workdir / f"{tag}-c{c}.json").read_text())
        if saved.get("failed"):
            first = next((e for e in saved.get("errors", []) if e), "?")
            raise RuntimeError(f"{saved['failed']} of {num_prompts} requests failed in vLLM (first error: "
                               f"{first[:500]}); server log {server.log_path}")
        out.append((saved, json.loads(Path(run["counters_out"]).read_text())))
    return out


def sweep_plan(*, methods, ks, target: str | None = None, eagle_drafter: str | None = None,
               peagle_drafter: str | None = None, dspark_drafter: str | None = None, dtype: str | None = None,
               max_model_len: int = 2048,
               enforce_eager: bool | None = None, memory_fraction: float | None = None,
               model_runner: str | None = None, device: str = "auto") -> tuple[str, list]:
    """(target, [((method, K), ServeConfig), ...]): one vLLM server per configuration, in run order.

    Starts nothing and downloads nothing: ``serve_command(cfg, port)`` gives each server's command. Settings
    left None take the device's defaults (:func:`serving_settings`).
    """
    server = serving_settings(methods, device, dtype=dtype, enforce_eager=enforce_eager,
                              memory_fraction=memory_fraction, model_runner=model_runner)
    server.pop("startup_timeout")
    from ..assets import smollm2_dir
    from ..bench import resolve_drafter

    target_dir = str(target or smollm2_dir())
    if not is_hub_id(target_dir) and not (Path(target_dir) / "config.json").exists():
        raise FileNotFoundError(f"{target_dir} is neither a Hugging Face model folder (no config.json) nor a "
                                "Hugging Face id (owner/name); pass --target with what vLLM should serve")
    if "dspark" in methods and server["enforce_eager"] and server["dtype"] == "float32":   # the CPU's settings
        import torch
        if not torch.cuda.is_available() or device == "cpu":
            raise ValueError(DSPARK_ON_CPU)
    drafters = {m: resolve_drafter(m, path, target is None) for m, path in
                (("eagle", eagle_drafter), ("peagle", peagle_drafter), ("dspark", dspark_drafter)) if m in methods}
    runner = {"dspark": "v2"}                  # vLLM serves DSpark on its V2 model runner only
    plan = [((m, k), ServeConfig(target=target_dir, method=m, drafter=drafters.get(m), k=k or 1,
                                 max_model_len=max_model_len,
                                 **{**server, "model_runner": runner.get(m, server["model_runner"])}))
            for m in methods for k in (ks if m != "ar" else [None])]
    return target_dir, plan


def run_vllm_bench(*, methods, ks, concurrency, prompts: str, num_prompts: int, max_new_tokens: int,
                   temperature: float = 0.0, dtype: str | None = None, target: str | None = None,
                   eagle_drafter: str | None = None, peagle_drafter: str | None = None,
                   dspark_drafter: str | None = None, enforce_eager: bool | None = None, max_model_len: int = 2048,
                   workdir: str | None = None,
                   seed: int = 0, progress: bool = True, spread: bool = False, memory_fraction: float | None = None,
                   model_runner: str | None = None, startup_timeout: float | None = None,
                   device: str = "auto") -> dict:
    """Run the sweep and return the JSON-ready result (``{"results": [...], ...}``).

    ``target`` and the drafters are local folders or Hugging Face ids (``openai/gpt-oss-20b``). The server
    settings left None (``dtype``, ``enforce_eager``, ``memory_fraction``, ``model_runner``,
    ``startup_timeout``) take ``device``'s defaults (:func:`serving_settings`; a GPU: bf16, CUDA graphs)."""
    from transformers import AutoTokenizer

    from ..prompts import load_prompts

    methods, ks, concurrency = list(methods), list(ks), list(concurrency)
    validate(methods, ks, concurrency, num_prompts, max_new_tokens)
    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError(f"vLLM is not installed; {VLLM_INSTALL}")
    settings = serving_settings(methods, device, dtype=dtype, enforce_eager=enforce_eager,
                                memory_fraction=memory_fraction, model_runner=model_runner,
                                startup_timeout=startup_timeout)
    dtype, enforce_eager, model_runner = settings["dtype"], settings["enforce_eager"], settings["model_runner"]
    target_dir, plan = sweep_plan(methods=methods, ks=ks, target=target, eagle_drafter=eagle_drafter,
                                  peagle_drafter=peagle_drafter, dspark_drafter=dspark_drafter,
                                  max_model_len=max_model_len, device=device,
                                  **{k: v for k, v in settings.items() if k != "startup_timeout"})
    for (m, k), cfg in plan:                   # refuse a mismatched drafter before any server starts
        if m != "ar":
            check_drafter_config(cfg.drafter, target_dir, m, k)

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    texts, add_special = render_prompts(tokenizer, load_prompts(prompts, num_prompts, spread=spread))
    if not texts:
        raise ValueError(f"no prompts in {prompts}")
    ids = [tokenizer(t, add_special_tokens=add_special)["input_ids"] for t in texts]
    longest = max(range(len(ids)), key=lambda i: len(ids[i]))
    if len(ids[longest]) + max_new_tokens > max_model_len:
        raise ValueError(f"prompt {longest} has {len(ids[longest])} tokens; with --max-new-tokens {max_new_tokens} it "
                         f"exceeds the server's max_model_len {max_model_len}: lower --max-new-tokens or "
                         "--num-prompts, or raise --max-model-len")
    work = Path(workdir or tempfile.mkdtemp(prefix="peagle-vllm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    dataset = write_dataset(texts, work / "prompts.jsonl", max_new_tokens)

    rows, outputs = [], []
    bar = tqdm(total=len(plan) * len(concurrency), desc="vllm-bench runs", disable=not progress, file=sys.stderr)
    for (method, k), cfg in plan:
        bar.set_postfix_str(f"starting vLLM: {method}" + (f" K={k}" if k else ""))
        with VLLMServer(cfg, startup_timeout=settings["startup_timeout"],
                        log_path=str(work / f"server-{method}-k{k or 0}.log")) as server:
            # warm-up, untimed, before any counter read: every prompt once at the top concurrency, short replies.
            # On a GPU the first requests compile kernels for each new prefill length (the parallel drafter's
            # input preparation too); a single short request left those compiles inside the timed runs.
            run_loads(server, dataset=dataset, num_prompts=len(texts), max_new_tokens=WARMUP_TOKENS,
                      concurrency=[max(concurrency)], temperature=temperature, add_special_tokens=add_special,
                      workdir=_fresh(work / f"warmup-{method}-k{k or 0}"), seed=seed)
            bar.set_postfix_str(f"{method}" + (f" K={k}" if k else "") + f" concurrency {concurrency}")
            runs = run_loads(server, dataset=dataset, num_prompts=len(texts), max_new_tokens=max_new_tokens,
                             concurrency=concurrency, temperature=temperature, add_special_tokens=add_special,
                             workdir=work, seed=seed)
            for c, (saved, counters) in zip(concurrency, runs):
                rows.append(make_row(method, k, c, saved, counters))
                outputs.append((list(saved["generated_texts"]), list(saved["output_lens"])))
            bar.update(len(concurrency))
    bar.close()
    mark_identical(rows, outputs, greedy=temperature <= 0)
    return {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} {platform.machine()}", "engine": "vllm", "vllm_version": vllm_version(),
            "target": target_dir,
            "settings": {"prompts": str(prompts), "num_prompts": num_prompts, "spread": spread,
                         "max_new_tokens": max_new_tokens,
                         "temperature": temperature, "methods": methods, "k": ks, "concurrency": concurrency,
                         "dtype": dtype, "enforce_eager": enforce_eager, "max_model_len": max_model_len,
                         "model_runner": model_runner,
                         "load_generator": "vllm bench serve"},
            "logs": str(work), "results": rows}


def _fresh(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {_md.version(dist)}"
        except _md.PackageNotFoundError:
            continue
    return None
