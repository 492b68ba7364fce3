"""``peagle-lab``: the command line. Results go to stdout; logs and progress bars to stderr."""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time


from .train.config import K_MAX   # the most draft tokens per step a flag accepts (the shipped drafters train depth 8)


def _bounds(lo, hi, lo_open: bool = False, hi_open: bool = False) -> str:
    """The allowed range in words: ">= 1", "> 0", "in (0, 1]"."""
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo}"
    return f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"


def _inside(value, lo, hi, lo_open: bool, hi_open: bool) -> bool:
    if lo is not None and (value < lo or (lo_open and value == lo)):
        return False
    return hi is None or (value < hi or (not hi_open and value == hi))


def _int_range(lo: int | None = None, hi: int | None = None):
    """An argparse ``type``: a whole number in [lo, hi] (either end may be open-ended with None)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not _inside(value, lo, hi, False, False):
            raise argparse.ArgumentTypeError(f"expected a whole number {_bounds(lo, hi)}, got {text!r}")
        return value
    parse.__name__ = "whole number"
    return parse


def _float_range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False):
    """An argparse ``type``: a finite number within [lo, hi], either end open (``lo_open``/``hi_open``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not _inside(value, lo, hi, lo_open, hi_open):
            raise argparse.ArgumentTypeError(f"expected a number {_bounds(lo, hi, lo_open, hi_open)}, got {text!r}")
        return value
    parse.__name__ = "number"
    return parse


def _int_list(lo: int = 1, hi: int | None = None):
    """An argparse ``type``: comma-separated whole numbers, each in [lo, hi], at least one."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            values = []
        if not values or not all(_inside(v, lo, hi, False, False) for v in values):
            raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers {_bounds(lo, hi)} "
                                             f"like 3,5,7, got {text!r}")
        return values
    parse.__name__ = "list of whole numbers"
    return parse


_ints = _int_list(1)                          # draft lengths, batch sizes, concurrencies: each >= 1
_draft_lengths = _int_list(1, K_MAX)
_positive = _int_range(1)
_count = _int_range(0)                        # a count that may be zero
_seed = _int_range(0, 2**63 - 1)              # what torch's generators take
_draft_length = _int_range(1, K_MAX)
_fraction = _float_range(0, 1, lo_open=True)  # (0, 1]: top-p, a share of memory
_non_negative = _float_range(0)
_above_zero = _float_range(0, lo_open=True)


def _method_drafter(text: str) -> tuple[str, str]:
    """An argparse ``type`` for ``--drafter METHOD=DIR``: the drafter a method drafts with (a folder; vllm-bench also
    takes a Hugging Face id)."""
    method, eq, where = text.partition("=")
    if not eq or method not in ("eagle", "peagle") or not where:
        raise argparse.ArgumentTypeError(f"expected METHOD=DIR with METHOD eagle or peagle, like peagle=runs/peagle, "
                                         f"got {text!r}")
    return method, where


def _add_drafter_arg(s: argparse.ArgumentParser, where: str = "a folder") -> None:
    s.add_argument("--drafter", type=_method_drafter, action="append", default=[], metavar="METHOD=DIR",
                   help=f"the drafter of eagle or peagle, {where}, e.g. peagle=runs/peagle-drafter; repeatable, "
                        "one per method (default: the shipped drafters with the embedded target)")


def _methods(text: str) -> list[str]:
    """Comma-separated methods, each once, at least one (argparse ``type``)."""
    methods = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not methods:
        raise argparse.ArgumentTypeError(f"expected comma-separated methods like ar,eagle,peagle, got {text!r}")
    return methods


def _device(text: str) -> str:
    """An argparse ``type`` for ``--device``: auto, cpu, cuda or cuda:N."""
    value = text.strip().lower()
    if value in ("auto", "cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit()):
        return value
    raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}")


def cmd_info(args) -> int:
    from .info import collect

    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"peagle-lab {info['peagle_lab']}  python {info['python']}  {info['platform']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v))
    dev = info["device"]
    cuda = "yes: " + ", ".join(dev["cuda_devices"]) if dev["cuda_available"] else "no"
    print(f"device: {dev['cpu_count']} CPUs, CUDA {cuda}")
    t = info["target"]
    print(f"target: {t['default']}  gguf={t['gguf']}  converted={t['converted']} ({t['hf_folder']})")
    for name, d in info["datasets"].items():
        print(f"dataset {name}: {d.get('count', '?')} prompts  {d['path'] or d['error']}")
    for d in info["drafters"] or [{"name": "(none shipped yet)", "path": ""}]:
        print(f"drafter {d['name']}: {d['path']}")
    return 0


def _embedded(target: str | None) -> bool:
    """Whether ``--target`` names the embedded SmolLM2-135M-Instruct (left out, or by its name)."""
    from .assets import DEFAULT_TARGET

    return target is None or str(target).lower() in (DEFAULT_TARGET, "smollm2-135m-instruct")


def cmd_generate(args) -> int:
    from .checkpoint import load_drafter
    from .engines.teaching import generate
    from .target import Target

    target = Target.load(args.target, device=args.device)
    path = args.drafter
    if args.method != "ar" and not path:      # the embedded target (check_args): its shipped drafter
        from .bench import resolve_drafter

        path = resolve_drafter(args.method, None, target_is_default=_embedded(args.target))
        print(f"[{args.method}] the shipped drafter {path} (pass --drafter FOLDER for another)", file=sys.stderr)
    drafter = load_drafter(path, target).to(target.device) if path else None
    out = generate(target, target.chat_ids(args.prompt), method=args.method, drafter=drafter, k=args.k,
                   max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    print(target.decode(out.tokens))
    tps = len(out.tokens) / out.seconds if out.seconds else 0.0
    extra = f", AL {out.acceptance.acceptance_length:.2f}" if out.acceptance else ""
    print(f"[{args.method}] {len(out.tokens)} tokens in {out.seconds:.2f} s = {tps:.1f} tok/s{extra}", file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from .bench import BenchSpec, run_bench, write_json
    from .engines.fast import FastConfig
    from .info import collect

    spec = BenchSpec(methods=args.methods, ks=args.k, prompts=args.prompts, num_prompts=args.num_prompts,
                     max_new_tokens=args.max_new_tokens, temperature=args.temperature, target_name=args.target,
                     drafters=dict(args.drafter), seed=args.seed, batch_sizes=args.batch_size, spread=args.spread,
                     engine=args.engine, device=args.device, dtype=args.dtype, hbm_bytes_per_s=args.hbm_gbps * 1e9,
                     time_budget_s=args.time_budget)
    fast = FastConfig(compile=args.compile, attention=args.attention)   # a bad value: one line from main (exit 2)
    result = run_bench(spec, fast)
    result["command"] = "peagle-lab " + " ".join(args.argv)
    result["info"] = collect(count_prompts=False)
    write_json(result, args.json)
    return 0


DRY_RUN_PORT = 8000   # what --dry-run prints; a real sweep picks a free port per server


def _serving(args) -> dict:
    """The sweep's server settings: the flags given, the device's defaults for the rest (serving_defaults)."""
    import torch

    from .serving.bench import serving_defaults

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    chosen = serving_defaults(cuda, args.methods)
    given = dict(dtype=args.dtype, memory_fraction=args.gpu_memory_utilization, model_runner=args.model_runner,
                 enforce_eager=args.enforce_eager)
    return {**chosen, **{k: v for k, v in given.items() if v is not None}}


def cmd_vllm_bench(args) -> int:
    from .bench import write_json
    from .info import collect
    from .serving.bench import run_vllm_bench, sweep_plan, validate
    from .serving.server import check_drafter_config, serve_command, server_env

    serving = _serving(args)
    drafters = dict(args.drafter)
    if args.dry_run:                       # the servers the sweep would start, one command each; starts nothing
        try:
            validate(args.methods, args.k, args.concurrency, args.num_prompts, args.max_new_tokens)
            _, plan = sweep_plan(methods=args.methods, ks=args.k, target=args.target,
                                 eagle_drafter=drafters.get("eagle"), peagle_drafter=drafters.get("peagle"),
                                 max_model_len=args.max_model_len,
                                 **{k: v for k, v in serving.items() if k != "startup_timeout"})
            for (method, k), cfg in plan:      # what the real sweep refuses before its first server
                if method != "ar":
                    check_drafter_config(cfg.drafter, cfg.target, method, k)
        except (ValueError, FileNotFoundError) as err:
            raise SystemExit(f"peagle-lab vllm-bench: {err}") from None
        for _, cfg in plan:
            env = " ".join(f"{k}={v}" for k, v in server_env(cfg).items())
            print((env + " " if env else "") + shlex.join(serve_command(cfg, DRY_RUN_PORT)))
        return 0
    try:
        result = run_vllm_bench(methods=args.methods, ks=args.k, concurrency=args.concurrency, prompts=args.prompts,
                                num_prompts=args.num_prompts, max_new_tokens=args.max_new_tokens,
                                temperature=args.temperature, target=args.target,
                                eagle_drafter=drafters.get("eagle"), peagle_drafter=drafters.get("peagle"),
                                max_model_len=args.max_model_len, workdir=args.logs, seed=args.seed,
                                spread=args.spread, **serving)
    except (ValueError, FileNotFoundError) as err:
        raise SystemExit(f"peagle-lab vllm-bench: {err}") from None
    result["command"] = "peagle-lab " + " ".join(args.argv)
    result["info"] = collect(count_prompts=False)
    write_json(result, args.json)
    return 0


def cmd_regenerate(args) -> int:
    from .lock import hold
    from .train.data import RegenerationMismatch

    try:
        with hold(args.out, "regenerate", create=False):   # a folder another run writes: refused before models load
            return _regenerate(args)
    except RegenerationMismatch as err:                  # --out holds another run's shards: refused, nothing written
        raise SystemExit(f"peagle-lab regenerate: {err}") from None


REGENERATE_BATCH = {"transformers": 16, "vllm": 256}      # --batch-size by engine (vllm: its max_num_seqs)


def _regenerate_engine(args, batch_size: int):
    """(what renders the prompts, what writes the replies) for ``--engine``: a loaded target for transformers;
    for vllm the target's chat template alone (vLLM loads the weights, on the first prompt that needs a reply)."""
    from .device import DTYPES, resolve_device

    if args.engine == "transformers":
        from .target import Target
        from .train.data import TransformersEngine

        target = Target.load(args.target, device=args.device, dtype=DTYPES[args.dtype])
        return target, TransformersEngine(target, batch_size)
    from .train.vllm_engine import ChatTokens, VLLMEngine, local_folder, require_vllm

    require_vllm()
    chat = ChatTokens(local_folder(args.target))
    return chat, VLLMEngine(chat, dtype=args.dtype, max_model_len=args.max_prompt_tokens + args.max_new_tokens,
                            max_num_seqs=batch_size, cuda=resolve_device(args.device) == "cuda",
                            memory_fraction=args.gpu_memory_utilization, seed=args.seed,
                            kv_cache_gib=args.kv_cache_gib)


def _regenerate(args) -> int:
    from .prompts import load_conversations, load_prompts
    from .train.data import regenerate, regenerate_conversations

    if args.all_turns:                                   # every human turn, answered turn by turn
        every = load_conversations(args.prompts)
        asks = every[args.skip_prompts: args.skip_prompts + args.num_prompts]
    else:
        every = load_prompts(args.prompts, args.num_prompts + args.skip_prompts)
        asks = every[args.skip_prompts:]
    if not asks:                                         # before any model loads
        raise ValueError(f"--skip-prompts {args.skip_prompts} skips all {len(every)} "
                         f"{'conversations' if args.all_turns else 'prompts'} of {args.prompts}; skip fewer")
    batch_size = args.batch_size or REGENERATE_BATCH[args.engine]
    target, engine = _regenerate_engine(args, batch_size)
    about = {"prompts": str(args.prompts), "num_prompts": args.num_prompts, "skip_prompts": args.skip_prompts}
    common = dict(max_new_tokens=args.max_new_tokens, batch_size=batch_size, shard_size=args.shard_size,
                  temperature=args.temperature, seed=args.seed, about=about, engine=engine)
    try:
        if args.all_turns:
            paths = regenerate_conversations(target, asks, args.out, max_context_tokens=args.max_prompt_tokens,
                                             **common)
            summary = {"out": args.out, "shards": len(paths), "conversations": len(asks)}
        else:
            paths = regenerate(target, asks, args.out, max_prompt_tokens=args.max_prompt_tokens, **common)
            summary = {"out": args.out, "shards": len(paths), "prompts": len(asks)}
    finally:
        engine.close()
    if engine.seconds:                                   # 0 when every shard was there already
        started = f"; {engine.start_seconds:.0f} s to start vLLM" if getattr(engine, "start_seconds", 0) else ""
        print(f"regenerate: {args.engine} wrote {engine.reply_tokens} reply tokens in {engine.seconds:.1f} s of "
              f"generation = {engine.reply_tokens / engine.seconds:.1f} tok/s{started}", file=sys.stderr)
    print(json.dumps(summary))
    return 0


# The train flags that set a TrainConfig field, by field (the rest of the config is reached by --set KEY=VALUE).
_TRAIN_FLAGS = {"method": "--method", "steps": "--steps", "batch_size": "--batch-size", "lr": "--lr",
                "num_layers": "--num-layers", "draft_vocab_size": "--draft-vocab-size", "max_len": "--max-len",
                "num_segments": "--segments"}


def _train_settings(args):
    """(TrainConfig, RunSettings) the train flags ask for: the preset (else the defaults), the flags given over it,
    then --set."""
    from .train.setup import RUN_FIELDS, RunSettings, split_settings, training_config

    config_sets, run_sets = split_settings(dict(args.set or []))
    given = {name: getattr(args, name) for name in _TRAIN_FLAGS if getattr(args, name) is not None}
    cfg = training_config(args.preset, **given, **config_sets)
    run = RunSettings(**{k: getattr(args, k) for k in RUN_FIELDS if hasattr(args, k)}, **run_sets)
    return cfg, run


def cmd_train(args) -> int:
    from .atomic import DestinationInUse
    from .train.setup import train
    from .train.trainer import ResumeMismatch

    try:
        summary = train(*_train_settings(args))
    except (DestinationInUse, ResumeMismatch) as err:   # a user's folder, or a run folder made otherwise
        raise SystemExit(f"peagle-lab train: {err}") from None
    if summary is not None:                             # rank 0 (or the only process)
        print(json.dumps(summary))
    return 0


def cmd_export_speculators(args) -> int:
    from .checkpoint import export_speculators, load_drafter
    from .compat import check_compatible
    from .target import Target

    from .atomic import DestinationInUse, check_replaceable
    from .checkpoint import DRAFTER_NOTE

    try:
        check_replaceable(args.out, args.overwrite, note=DRAFTER_NOTE)   # before loading: a user's folder stays
        target = Target.load(args.target)
        drafter = load_drafter(args.drafter, target)
        check_compatible(drafter, target, args.k if drafter.cfg.parallel_drafting else None)   # vLLM would too
        arch = list(getattr(target.config, "architectures", None) or [type(target.model).__name__])
        path = export_speculators(drafter, args.out, verifier_name=args.verifier or target.name,
                                  verifier_architectures=arch, k=args.k, overwrite=args.overwrite, flag="--overwrite")
    except DestinationInUse as err:
        raise SystemExit(f"peagle-lab export-speculators: {err}") from None
    print(json.dumps({"speculators_export": str(path)}))
    return 0


def cmd_materialise(args) -> int:
    from .assets import resolve_target
    from .materialise import materialise_for_vllm

    print(materialise_for_vllm(args.drafter, resolve_target(args.target)))
    return 0


def cmd_check(args) -> int:
    from .check import check_drafter, folder_problems
    from .target import Target

    problems = folder_problems(args.drafter)            # a broken folder is named before any model loads
    report = ({"problems": problems, "warnings": [], "probe": None} if problems
              else check_drafter(args.drafter, Target.load(args.target, device=args.device), k=args.k))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for p in report["problems"]:
            print(f"PROBLEM: {p}")
        for w in report["warnings"]:
            print(f"warning: {w}")
        if report["probe"]:
            pr = report["probe"]
            print(f"probe ({pr['method']}, K={pr['k']}, 2 MT-Bench prompts): AL {pr['acceptance_length']:.2f}, "
                  f"per position {[round(a, 2) for a in pr['acceptance_per_position']]}")
        if not report["problems"]:
            print("ok: the drafter fits this target")
    return 1 if report["problems"] else 0


def _drafter_specs(specs: list[str]) -> dict[str, str]:
    """``NAME=FOLDER``, a folder, or a shipped drafter's name -> ``{label: folder}``. A spec that names no
    drafter raises ValueError naming the fix (check_args turns it into exit 2 before any model loads)."""
    from pathlib import Path

    from .drafters_registry import shipped

    out = {}
    for spec in specs:
        is_folder = (Path(spec) / "config.json").exists()            # a folder whose name holds "=" stays whole
        split = "=" in spec and not is_folder
        name, _, folder = spec.partition("=") if split else ("", "", spec)
        if split and not name.strip():
            raise ValueError(f"drafter {spec!r}: the label before '=' is empty; pass NAME=FOLDER with a name, "
                             "or FOLDER alone")
        if not Path(folder).exists() and folder in shipped():
            folder = str(shipped()[folder])
        if not (Path(folder) / "config.json").exists():
            have = ", ".join(shipped()) or "none"
            raise ValueError(f"drafter {spec!r}: {folder!r} is neither a drafter folder (with config.json) nor a "
                             f"shipped drafter (shipped: {have}); pass FOLDER, a shipped name or NAME=FOLDER")
        label = name or Path(folder).name
        if label in out:
            raise ValueError(f"the label {label!r} names two drafters ({out[label]}, {folder}); "
                             "label them: NAME=FOLDER")
        out[label] = folder
    return out


def cmd_eval(args) -> int:
    import datetime as dt

    from .compat import IncompatibleDrafter, check_compatible
    from .checkpoint import load_drafter
    from .train.replay import evaluate_drafters, greedy_replies
    from .prompts import load_categories, load_prompts
    from .target import Target

    specs = _drafter_specs(args.drafters)
    texts = load_prompts(args.prompts, args.num_prompts, spread=args.spread)   # a bad prompt file fails before loads
    categories = load_categories(args.prompts, args.num_prompts, spread=args.spread)
    target = Target.load(args.target, device=args.device)
    drafters = {name: load_drafter(folder, target).to(target.device).eval() for name, folder in specs.items()}
    for name, d in drafters.items():
        try:
            check_compatible(d, target, args.k if d.cfg.parallel_drafting else None)
        except IncompatibleDrafter as err:
            raise SystemExit(f"peagle-lab eval: {name}: {err}") from None
    prompts = [target.chat_ids(p) for p in texts]
    t0 = time.perf_counter()
    replies = greedy_replies(target, prompts, k=args.k, max_new_tokens=args.max_new_tokens, progress=True)
    replies_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    results = evaluate_drafters(target, drafters, prompts, replies, k=args.k, max_new_tokens=args.max_new_tokens,
                                categories=categories)
    print(f"{len(prompts)} {args.prompts} prompts ({'spread' if args.spread else 'first'}), "
          f"{args.max_new_tokens} new tokens, K={args.k}, T=0; greedy replies {replies_s:.0f} s, "
          f"replay {time.perf_counter() - t1:.0f} s", file=sys.stderr)
    width, pw = max(len(n) for n in results) + 2, max(5 * args.k - 1, len("acceptance per position"))
    print(f"{'drafter':<{width}}{'method':<8}{'AL':>6}  {'acceptance per position':<{pw}}  "
          "second draft right  coverage")
    for name, r in results.items():
        pos = " ".join(f"{a:.2f}" for a in r["acceptance_per_position"])
        second = r["agreement_all_positions"][1] if args.k > 1 else float("nan")
        print(f"{name:<{width}}{r['method']:<8}{r['acceptance_length']:>6.2f}  {pos:<{pw}}  {second:>18.2f}  "
              f"{r['draft_vocab_coverage']:>8.1%}")
    for name, r in results.items():
        if "acceptance_length_by_category" in r:
            cats = ", ".join(f"{c} {al:.2f}" for c, al in r["acceptance_length_by_category"].items())
            print(f"{name} by category: {cats}")
    if args.json:
        from .atomic import atomic_file

        with atomic_file(args.json) as tmp:
            tmp.chmod(0o644)
            tmp.write_text(json.dumps({
                "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "command": "peagle-lab " + " ".join(args.argv),
                "settings": {"k": args.k, "prompts": args.prompts, "num_prompts": len(prompts), "spread": args.spread,
                             "max_new_tokens": args.max_new_tokens, "replies_seconds": round(replies_s, 1),
                             "stop_at_eos": True},
                "drafters": specs, "results": results}, indent=1))
    return 0


def _add_prompt_args(s: argparse.ArgumentParser, num_prompts: int = 10, num_help: str | None = None) -> None:
    """The prompt-set flags bench, vllm-bench and eval share: --prompts, --num-prompts, --spread, --max-new-tokens."""
    s.add_argument("--prompts", default="mt-bench", help="mt-bench, humaneval, sharegpt or a .jsonl file")
    s.add_argument("--num-prompts", type=_positive, default=num_prompts, help=num_help)
    s.add_argument("--spread", action="store_true",
                   help="take --num-prompts evenly spaced over the set instead of the first (MT-Bench is sorted by "
                        "category; its first 10 are all writing)")
    s.add_argument("--max-new-tokens", type=_positive, default=128)


def add_info_parser(sub) -> None:
    s = sub.add_parser("info", help="versions, devices, target, datasets and shipped drafters")
    s.add_argument("--json", action="store_true", help="print only JSON on stdout")
    s.set_defaults(fn=cmd_info)


def add_generate_parser(sub) -> None:
    s = sub.add_parser("generate", help="generate a reply to one prompt (ar, eagle or peagle)")
    s.add_argument("prompt")
    s.add_argument("--method", default="ar", choices=["ar", "eagle", "peagle"])
    s.add_argument("--drafter", help="drafter checkpoint folder for eagle / peagle (default with the embedded "
                   "target: the shipped one)")
    s.add_argument("--k", type=_draft_length, default=5, help=f"draft tokens per step (1..{K_MAX})")
    s.add_argument("--max-new-tokens", type=_positive, default=128)
    s.add_argument("--temperature", type=_non_negative, default=0.0, help="0 = greedy")
    s.add_argument("--top-p", type=_fraction, default=1.0, help="nucleus sampling mass, in (0, 1] (1 = off)")
    s.add_argument("--seed", type=_seed, default=0)
    s.add_argument("--target", default=None, help="HF model id or folder (default: embedded SmolLM2-135M-Instruct)")
    s.add_argument("--device", type=_device, default="auto", help="auto (CUDA when present), cpu or cuda")
    s.set_defaults(fn=cmd_generate)


def add_bench_parser(sub) -> None:
    s = sub.add_parser("bench", help="tokens/s and acceptance of ar, hf, eagle, peagle on the same prompts")
    s.add_argument("--methods", type=_methods, default=["ar", "hf", "eagle", "peagle"],
                   help="comma list of ar,hf,eagle,peagle")
    s.add_argument("--k", type=_draft_lengths, default=[3, 5, 7], help="draft lengths, e.g. 3,5,7")
    _add_prompt_args(s)
    s.add_argument("--temperature", type=_non_negative, default=0.0)
    _add_drafter_arg(s)
    s.add_argument("--target", default=None)
    s.add_argument("--seed", type=_seed, default=0)
    s.add_argument("--batch-size", type=_ints, default=[1],
                   help="requests decoded together (greedy only), e.g. 1,4; tokens/s counts all of them")
    s.add_argument("--device", type=_device, default="auto", help="auto (CUDA when present), cpu or cuda")
    s.add_argument("--engine", default="auto", choices=["auto", "teaching", "fast"],
                   help="auto: fast (static caches, CUDA graphs) on CUDA, teaching on CPU; fast is greedy, batch 1")
    s.add_argument("--compile", nargs="?", const=True, default=False, metavar="MODE",
                   help="fast engine: fuse each step with torch.compile before capturing it (fewer kernels a step; "
                        "the warm-up pays the compile, reported per row as warmup_s); MODE max-autotune-no-cudagraphs "
                        "also autotunes the matmuls (a longer compile)")
    s.add_argument("--attention", default="auto", choices=["auto", "sdpa", "triton"],
                   help="fast engine: attention over the static caches -- auto (triton on CUDA, sdpa elsewhere), sdpa "
                        "(torch, masked over every slot) or triton (peagle_lab's split kernel, cost follows the "
                        "live slots)")
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="target and drafter weights (float32 on CPUs without native bf16)")
    s.add_argument("--time-budget", type=_above_zero, default=None, metavar="SECONDS",
                   help="start no new round of prompts after this many seconds (loading included); rows report the "
                        "prompts actually run (a round is lcm(batch sizes) prompts; the first always runs)")
    s.add_argument("--hbm-gbps", type=_above_zero, default=4800.0,
                   help="memory bandwidth (GB/s) for the memory floor on CUDA (default: H200, 4800)")
    s.add_argument("--json", default=None, help="also write the result to this file")
    s.set_defaults(fn=cmd_bench)


def add_vllm_bench_parser(sub) -> None:
    s = sub.add_parser("vllm-bench",
                       help="tokens/s and acceptance of ar, eagle, peagle in real vLLM, over K and concurrency")
    s.add_argument("--methods", type=_methods, default=["ar", "eagle", "peagle"], help="comma list of ar,eagle,peagle")
    s.add_argument("--k", type=_draft_lengths, default=[3, 5, 7], help="draft lengths, e.g. 3,5,7 (one server each)")
    s.add_argument("--concurrency", type=_ints, default=[1, 4], help="max requests in flight, e.g. 1,2,4,8")
    _add_prompt_args(s)
    s.add_argument("--temperature", type=_non_negative, default=0.0)
    s.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"],
                   help="vLLM --dtype (default: bfloat16 on a CUDA GPU, float32 on a CPU)")
    _add_drafter_arg(s, "a folder or a Hugging Face id")
    s.add_argument("--target", default=None, help="HF folder or Hugging Face id vLLM serves "
                                                  "(default: the embedded SmolLM2, converted)")
    s.add_argument("--max-model-len", type=_positive, default=2048)
    s.add_argument("--gpu-memory-utilization", type=_fraction, default=None,
                   help="fraction of GPU (or CPU) memory vLLM may reserve (default 0.35)")
    s.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=None,
                   help="vLLM's --enforce-eager: no compile, no CUDA graphs (default on a CPU); --no-enforce-eager "
                        "compiles the model and captures CUDA graphs (default on a CUDA GPU)")
    s.add_argument("--model-runner", choices=["auto", "v1", "v2"], default=None,
                   help="vLLM's model runner (default on a GPU when peagle is swept: v1 for every method, since "
                        "vLLM runs parallel drafting only there; auto: vLLM's own choice)")
    s.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="whose defaults to take: auto (CUDA when present), cpu or cuda")
    s.add_argument("--dry-run", action="store_true",
                   help="print the vLLM server command of every configuration (port 8000) and exit; starts nothing")
    s.add_argument("--logs", default=None, help="folder for server logs and vLLM bench results (default: a temp dir)")
    s.add_argument("--seed", type=_seed, default=0)
    s.add_argument("--json", default=None, help="also write the result to this file")
    s.set_defaults(fn=cmd_vllm_bench)


def add_regenerate_parser(sub) -> None:
    s = sub.add_parser("regenerate", help="training data: replies regenerated by the target, in resumable shards")
    s.add_argument("--prompts", default="sharegpt", help="sharegpt (default), mt-bench, humaneval or a .jsonl file")
    s.add_argument("--num-prompts", type=_positive, default=2000)
    s.add_argument("--skip-prompts", type=_count, default=0, help="start after this many prompts (a second data set)")
    s.add_argument("--max-prompt-tokens", type=_positive, default=384,
                   help="longest prompt (with --all-turns: longest context) asked; longer first turns are shortened, "
                        "longer later contexts end the conversation")
    s.add_argument("--all-turns", action="store_true",
                   help="answer every human turn of each conversation (ShareGPT, or a JSONL file's \"turns\" lists), "
                        "turn by turn, with the target's own earlier replies in context (one sample per turn)")
    s.add_argument("--out", required=True, help="folder for shard-*.pt; a rerun with the same settings resumes it, "
                                                "other settings are refused (regenerate.json records them)")
    s.add_argument("--max-new-tokens", type=_positive, default=256)
    s.add_argument("--engine", default="transformers", choices=["transformers", "vllm"],
                   help="what writes the replies: transformers (default) or vLLM's offline engine (the same shards; "
                        "worth it on a GPU with CUDA vLLM and large batches)")
    s.add_argument("--batch-size", type=_positive, default=None,
                   help="prompts decoded together (default 16); with --engine vllm, vLLM's max_num_seqs (default 256)")
    s.add_argument("--gpu-memory-utilization", type=_fraction, default=None,
                   help="--engine vllm: the share of GPU (or CPU) memory vLLM reserves (default 0.85 on a GPU, "
                        "0.35 on a CPU)")
    s.add_argument("--kv-cache-gib", type=_above_zero, default=None,
                   help="--engine vllm: a KV cache of exactly this many GiB; vLLM then skips its memory profiling, "
                        "so engines (or other GPU jobs) may start side by side on one GPU")
    s.add_argument("--shard-size", type=_positive, default=256)
    s.add_argument("--temperature", type=_non_negative, default=0.0)
    s.add_argument("--seed", type=_seed, default=0)
    s.add_argument("--target", default=None)
    s.add_argument("--device", type=_device, default="auto", help="auto (CUDA when present), cpu or cuda")
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="the target's weights while it writes the replies (default float32; bfloat16 is faster on "
                        "a GPU, emulated and slower on CPUs without native bf16)")
    s.set_defaults(fn=cmd_regenerate)


def _setting(text: str) -> tuple[str, object]:
    """An argparse ``type`` for ``--set KEY=VALUE``: a TrainConfig field (or a run setting) and a value it accepts."""
    from .train.setup import parse_setting

    try:
        return parse_setting(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_train_parser(sub) -> None:
    from .train.config import PRESETS, TrainConfig

    D = TrainConfig()                                   # one set of defaults: the config's
    s = sub.add_parser("train", help="train an EAGLE-3 (eagle) or P-EAGLE (peagle) drafter; resumes from --out")
    s.add_argument("--preset", default=None, choices=list(PRESETS),
                   help="README's GPU recipe: peagle (4 layers, COD 0.8, feature noise 0.05) or eagle (1 layer), both "
                        "batch 32, draft vocab 8192, 20000 steps, grouped by length; flags and --set override it")
    s.add_argument("--method", default=None, choices=["peagle", "eagle", "dspark"],
                   help=f"default: the preset's, else {D.method}")
    s.add_argument("--data", required=True, help="folder written by `peagle-lab regenerate`")
    s.add_argument("--out", required=True, help="run folder (checkpoint.pt lives here; a rerun resumes it)")
    s.add_argument("--export", default=None, help="drafter folder to write (default OUT/drafter): new, empty or an "
                                                   "earlier export")
    s.add_argument("--overwrite", action="store_true",
                   help="let --export replace a folder peagle-lab did not write (its files are deleted)")
    s.add_argument("--target", default=None, help="HF model id or folder (default: embedded SmolLM2-135M-Instruct)")
    s.add_argument("--device", type=_device, default="auto", help="auto (CUDA when present), cpu or cuda")
    s.add_argument("--steps", type=_positive, default=None,
                   help=f"optimiser steps (default: the preset's, else {D.steps})")
    s.add_argument("--batch-size", type=_positive, default=None,
                   help=f"conversations per optimiser step (default: the preset's, else {D.batch_size})")
    s.add_argument("--lr", type=_above_zero, default=None, help=f"peak learning rate (default {D.lr})")
    s.add_argument("--num-layers", type=_positive, default=None,
                   help=f"drafter layers (default: the preset's, else {D.num_layers})")
    s.add_argument("--draft-vocab-size", type=_positive, default=None,
                   help=f"tokens the drafter drafts (default: the preset's, else {D.draft_vocab_size})")
    s.add_argument("--max-len", type=_int_range(2), default=None,
                   help=f"tokens per conversation, longer are cut (default {D.max_len})")
    s.add_argument("--segments", type=_positive, default=None, dest="num_segments",
                   help="sequence partitioning: segments per packed sequence (long sequences; default 1)")
    s.add_argument("--init-from", default=None,
                   help="start from an exported drafter folder (fine-tuning): its layers, width, vocabulary and depth "
                        "replace the config's")
    s.add_argument("--val-prompts", type=_count, default=0,
                   help="at each checkpoint, replay greedy decoding on this many prompts and log the validation AL "
                        "(equal to the engine's; one drafter pass per reply)")
    s.add_argument("--max-minutes", type=_above_zero, default=None, help="shorten the run to fit this wall time")
    s.add_argument("--stop-after", type=_positive, default=None,
                   help="stop after this many steps of this launch (a rehearsed interruption: the same command "
                        "resumes from the last checkpoint towards --steps)")
    s.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                   help="any other training setting, repeatable: a TrainConfig field (cod_ratio=0.8, max_depth=8, "
                        "hidden_noise=0.05, share_lm_head=true, mask_token_id=16, learn_mask_embedding=false, "
                        "layout=packed, warmup_steps=100, checkpoint_every=300, seed=1, val_k=7, ...) or "
                        "export_dtype, val_set, val_tokens; docs/training.md lists them")
    s.set_defaults(fn=cmd_train)


def add_check_parser(sub) -> None:
    s = sub.add_parser("check", help="validate a drafter against a target and probe its acceptance")
    s.add_argument("drafter", help="drafter folder, or a shipped drafter's name (eagle-smollm2, peagle-smollm2)")
    s.add_argument("--target", default=None)
    s.add_argument("--k", type=_draft_length, default=None,
                   help="K of the acceptance probe (default: the trained depth of a P-EAGLE drafter, else 3)")
    s.add_argument("--device", type=_device, default="auto",
                   help="auto (CUDA when present), cpu or cuda: where the probe runs")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_check)


def add_materialise_parser(sub) -> None:
    s = sub.add_parser("materialise", help="print the folder vLLM loads for a drafter (one storing a learned mask row "
                                           "is written once into the cache as the target's embedding with that row)")
    s.add_argument("drafter", help="drafter folder, or a shipped drafter's name (eagle-smollm2, peagle-smollm2)")
    s.add_argument("--target", default=None, help="the target's HF folder (default: the embedded SmolLM2, converted)")
    s.set_defaults(fn=cmd_materialise)


def add_eval_parser(sub) -> None:
    s = sub.add_parser("eval", help="acceptance of drafters on a prompt set at T=0, replayed offline "
                                    "(the engine's numbers, faster)")
    s.add_argument("drafters", nargs="+",
                   help="drafter folders, shipped names (peagle-smollm2, eagle-smollm2) or NAME=FOLDER")
    _add_prompt_args(s, num_prompts=80, num_help="prompts to score (default 80: all of MT-Bench)")
    s.add_argument("--k", type=_draft_length, default=7, help="draft tokens per step")
    s.add_argument("--target", default=None)
    s.add_argument("--device", type=_device, default="auto", help="auto (CUDA when present), cpu or cuda")
    s.add_argument("--json", default=None, help="also write the results to this file")
    s.set_defaults(fn=cmd_eval)


def add_export_speculators_parser(sub) -> None:
    s = sub.add_parser("export-speculators", help="write a drafter in the speculators format (vLLM >= 0.33 reads it)")
    s.add_argument("drafter", help="drafter folder in vLLM's EAGLE-3 layout, or a shipped drafter's name")
    s.add_argument("out", help="new folder for the speculators-format copy (or an empty one, or an earlier export)")
    s.add_argument("--overwrite", action="store_true",
                   help="let OUT replace a folder peagle-lab did not write (its files are deleted)")
    s.add_argument("--verifier", default=None, help="target name recorded in the config (default: the target's)")
    s.add_argument("--k", type=_draft_length, default=None, help="speculative tokens (default: trained depth, else 3)")
    s.add_argument("--target", default=None)
    s.set_defaults(fn=cmd_export_speculators)


class _Parser(argparse.ArgumentParser):
    """argparse with its complaint on one line: the command, the flag and what the flag accepts (exit 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _folder_fault(value: str, what: str = "drafter") -> str | None:
    """Why ``value`` is not a local model folder (with config.json), or None when it is one."""
    from pathlib import Path

    path = Path(value).expanduser()
    if not path.exists():
        from .drafters_registry import shipped

        return f"{value}: no such folder (nor a shipped drafter: {', '.join(sorted(shipped()))})"
    if not (path / "config.json").is_file():
        return f"{value} has no config.json: not a {what} folder"
    return None


def _check_paths(p: argparse.ArgumentParser, args) -> None:
    """Local folders a command reads must exist before any model loads (exit 2 with the flag named)."""
    from pathlib import Path

    local = {"generate": [("--drafter", args.drafter if args.command == "generate" else None)],
             "bench": [(f"--drafter {m}=", d) for m, d in args.drafter] if args.command == "bench" else [],
             "materialise": [("drafter", getattr(args, "drafter", None))],
             "export-speculators": [("drafter", getattr(args, "drafter", None))],
             "train": [("--init-from", getattr(args, "init_from", None))]}.get(args.command, [])
    for flag, value in local:
        fault = value and _folder_fault(value)
        if value and not fault:                                        # weights load_drafter reads: intact?
            from .check import folder_problems

            fault = next(iter(folder_problems(Path(value).expanduser())), None)
        if fault:
            p.error(f"{flag}{'' if flag.endswith('=') else ' '}{fault}")
    if args.command == "vllm-bench":                    # a Hugging Face id passes; a missing local path does not
        from .serving.server import is_hub_id

        for method, value in args.drafter:
            fault = not is_hub_id(value) and _folder_fault(value)
            if fault:
                p.error(f"--drafter {method}={fault} (nor a Hugging Face id owner/name)")
    if args.command == "check" and not Path(args.drafter).expanduser().is_dir():
        fault = ("is a file, not a drafter folder" if Path(args.drafter).expanduser().exists() else
                 "no such folder")
        p.error(f"drafter {args.drafter}: {fault}")
    if args.command == "train" and not any(Path(args.data).expanduser().glob("shard-*.pt")):
        p.error(f"--data {args.data}: no shard-*.pt files there (write them with `peagle-lab regenerate --out "
                f"{args.data}`)")
    if getattr(args, "prompts", None):
        from .prompts import _set_path

        name, path = _set_path(args.prompts)
        if name is None and not path.expanduser().is_file():
            p.error(f"--prompts {args.prompts}: neither mt-bench, humaneval, sharegpt nor an existing .jsonl file")


def _check_regenerate_engine(p: argparse.ArgumentParser, args) -> None:
    import importlib.util

    if args.engine == "vllm" and importlib.util.find_spec("vllm") is None:
        from .serving.server import VLLM_INSTALL

        p.error(f"--engine vllm: vLLM is not installed; {VLLM_INSTALL}")
    for flag in ("gpu_memory_utilization", "kv_cache_gib"):
        if args.engine != "vllm" and getattr(args, flag) is not None:
            p.error(f"--{flag.replace('_', '-')} is for --engine vllm (transformers takes what it needs)")


def _check_train(p: argparse.ArgumentParser, args) -> None:
    """--set never repeats a flag; the resolved config is one a run can train (exit 2 before any model loads)."""
    for key, _ in args.set:
        if key in _TRAIN_FLAGS:
            p.error(f"--set {key}: use {_TRAIN_FLAGS[key]} (each setting has one way in)")
    cfg, _ = _train_settings(args)
    if cfg.method == "peagle" and args.val_prompts and not args.init_from and cfg.val_k > cfg.max_depth:
        p.error(f"val_k {cfg.val_k} exceeds max_depth {cfg.max_depth}: a P-EAGLE drafter drafts at most the depths "
                "it was trained on (--set val_k=K with K <= max_depth, or a larger --set max_depth)")
    if cfg.share_lm_head and args.draft_vocab_size is not None:
        p.error(f"--draft-vocab-size {args.draft_vocab_size} with --set share_lm_head=true: the target's output layer "
                "drafts its whole vocabulary; drop one of the two")


def check_args(parser: argparse.ArgumentParser, args) -> None:
    """Rules that join several flags (argparse types check each flag alone) and the local folders a command
    reads; ``error`` exits 2 with one line naming the command and the flag, before any model loads."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p = subs.choices[args.command]
    _shipped_names(args)
    if args.command == "generate" and args.method == "ar" and args.drafter:
        p.error("--drafter is for --method eagle or peagle (plain decoding drafts nothing): add the method it drafts "
                "for, e.g. --method peagle")
    if args.command == "generate" and args.method != "ar" and not args.drafter and not _embedded(args.target):
        p.error(f"--method {args.method} with --target {args.target} needs --drafter FOLDER (a drafter trained for "
                "that target; the shipped ones fit only the embedded SmolLM2-135M-Instruct; or use --method ar)")
    if args.command == "regenerate":
        _check_regenerate_engine(p, args)
        if args.all_turns and str(args.prompts).lower() in ("mt-bench", "humaneval"):
            p.error(f"--all-turns --prompts {args.prompts}: conversations come from sharegpt or a .jsonl file with "
                    "\"turns\" (MT-Bench and HumanEval are held out: every drafter is scored on them)")
    methods = [m for m, _ in args.drafter] if args.command in ("bench", "vllm-bench") else []
    for method in {m for m in methods if methods.count(m) > 1}:
        p.error(f"--drafter {method}=... is given twice; one drafter per method")
    if args.command == "train":
        _check_train(p, args)
    if args.command == "eval":
        try:
            specs = _drafter_specs(args.drafters)
        except ValueError as err:
            p.error(str(err))
        from pathlib import Path

        from .check import folder_problems

        for name, folder in specs.items():       # the weights load_drafter reads: all there, and intact?
            fault = _folder_fault(folder) or next(iter(folder_problems(Path(folder).expanduser())), None)
            if fault:
                p.error(f"drafter {name}: {fault}")
    device = getattr(args, "device", None)
    if device and device.startswith("cuda") and not getattr(args, "dry_run", False):   # a dry run prints a GPU's plan
        from .device import device_problem

        if device_problem(device):
            p.error(device_problem(device))
    if args.command == "generate":
        from .prompts import prompt_problem

        if prompt_problem(args.prompt):
            p.error(f"the prompt {prompt_problem(args.prompt)}; give the model some text to answer")
    _check_paths(p, args)
    _check_outputs(p, args)


def _shipped_names(args) -> None:
    """A drafter may be named as eval's are (generate, check, materialise, export-speculators, train --init-from,
    bench's and vllm-bench's --drafter METHOD=NAME): a shipped drafter's name stands for its folder (a folder of
    that name in the working directory comes first)."""
    from pathlib import Path

    from .drafters_registry import shipped

    def resolved(value):
        if isinstance(value, str) and value in shipped() and not Path(value).expanduser().exists():
            return str(shipped()[value])
        return value

    if args.command in SINGLE_DRAFTER:
        args.drafter = resolved(args.drafter)
    if args.command in ("bench", "vllm-bench"):          # --drafter METHOD=NAME as well as METHOD=FOLDER
        args.drafter = [(method, resolved(where)) for method, where in args.drafter]
    if args.command == "train":
        args.init_from = resolved(args.init_from)


SINGLE_DRAFTER = ("generate", "check", "materialise", "export-speculators")


def _holds(outer: str, inner: str) -> bool:
    """True when folder ``inner`` is ``outer`` or lies inside it: replacing ``outer`` would take ``inner`` along."""
    from pathlib import Path

    a, b = Path(outer).expanduser().resolve(), Path(inner).expanduser().resolve()
    return a == b or a in b.parents


def _check_outputs(p: argparse.ArgumentParser, args) -> None:
    """An export never replaces what its own command reads or keeps (the drafter it converts or starts from, the
    target, the data, the run folder with checkpoint.pt), even one peagle-lab wrote, unless --overwrite says so;
    outputs are writable places (exit 2, before any model loads)."""
    from pathlib import Path

    read = {"export-speculators": [("the drafter folder", args.drafter if args.command == "export-speculators"
                                    else None), ("--target", getattr(args, "target", None))],
            "train": [("the run folder (with its checkpoint.pt) --out", getattr(args, "out", None)),
                      ("--init-from", getattr(args, "init_from", None)), ("--data", getattr(args, "data", None))]
            }.get(args.command, [])
    out_flag, out = {"export-speculators": ("out", getattr(args, "out", None)),
                     "train": ("--export", getattr(args, "export", None))}.get(args.command, (None, None))
    for what, folder in read:
        exists = Path(folder).expanduser().exists() if folder else False      # a hub id (--target) is no folder
        if out and folder and not getattr(args, "overwrite", False) and (exists or what.startswith("the run")) \
                and _holds(out, folder):
            p.error(f"{out_flag} {out} is (or holds) {what} {folder}, which this command reads: writing there would "
                    "delete it. Choose a new or empty folder, or pass --overwrite to replace it")
    folders = [("--out", getattr(args, "out", None)), ("--export", getattr(args, "export", None)),
               ("--logs", getattr(args, "logs", None))]
    files = [("--json", args.json if isinstance(getattr(args, "json", None), str) else None)]
    for flag, value in folders + files:
        if not value:
            continue
        path = Path(value).expanduser()
        if (flag, value) in folders and path.exists() and not path.is_dir():
            p.error(f"{flag} {value} is a file; give a folder (new, empty, or one peagle-lab wrote)")
        if (flag, value) in files and path.is_dir():
            p.error(f"{flag} {value} is a folder; give a file name, like {Path(value) / 'result.json'}")
        parent = next((a for a in path.absolute().parents if a.exists()), None)
        if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK):
            p.error(f"{flag} {value}: {parent or path} is not a folder this user can write in")
    if args.command == "vllm-bench" and args.logs and args.prompts:
        from .prompts import _set_path

        name, prompts = _set_path(args.prompts)
        ours = (Path(args.logs).expanduser() / "prompts.jsonl").resolve()      # what the sweep writes there
        if name is None and prompts.expanduser().resolve() == ours:
            p.error(f"--prompts {args.prompts} is where the sweep writes its own prompts.jsonl in --logs "
                    f"{args.logs}; keep your prompt file elsewhere or choose another --logs")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="peagle-lab", description="Learn, train and serve P-EAGLE parallel speculative decoding.")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (add_info_parser, add_generate_parser, add_bench_parser, add_vllm_bench_parser, add_regenerate_parser,
                add_train_parser, add_check_parser, add_materialise_parser, add_eval_parser,
                add_export_speculators_parser):
        add(sub)
    return p


class Refused(SystemExit):
    """Exit 2 (bad input, as argparse's), with the one line already printed as its text, so a caller catching
    SystemExit still reads why."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def main(argv: list[str] | None = None) -> int:
    """Parse, check the flags together (both exit 2 before any model loads), run the command. A refusal from the
    library (ValueError, FileNotFoundError, a missing asset) or from the command itself (a folder in use, a resume
    or regeneration that does not match) ends in one line and exit 2; PEAGLE_TRACEBACK=1 shows the traceback
    instead."""
    import os

    from .assets import AssetMissing

    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    check_args(parser, args)
    from .signals import as_interrupt

    try:
        with as_interrupt():                  # SIGTERM and SIGHUP end a command as Ctrl-C does
            return args.fn(args)
    except (ValueError, FileNotFoundError, AssetMissing) as err:
        if os.environ.get("PEAGLE_TRACEBACK"):
            raise
        print(f"peagle-lab {args.command}: {' '.join(str(err).split())}", file=sys.stderr)
        raise SystemExit(2) from None
    except SystemExit as stop:            # a command's own refusal, SystemExit("peagle-lab <cmd>: ..."): exit 2 too
        if not isinstance(stop.code, str):
            raise
        print(" ".join(stop.code.split()), file=sys.stderr)
        raise Refused(stop.code) from None
    except KeyboardInterrupt as stop:
        if os.environ.get("PEAGLE_TRACEBACK"):
            raise
        kept = {"train": "the last checkpoint.pt is kept (a save is atomic); rerun the same command to resume from it",
                "regenerate": "every whole shard is kept; rerun the same command to write only what is missing"}
        print(f"\npeagle-lab {args.command}: interrupted. " + kept.get(args.command, "Nothing was half-written."),
              file=sys.stderr)
        raise SystemExit(128 + getattr(stop, "signum", 2)) from None   # 130 for Ctrl-C, 143 for SIGTERM


if __name__ == "__main__":
    sys.exit(main())
