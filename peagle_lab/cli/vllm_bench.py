"""``peagle-lab vllm-bench``: the same prompts served by real vLLM, over methods, K and concurrency
(:func:`peagle_lab.serving.bench.run_vllm_bench`, which picks the device's defaults)."""
from __future__ import annotations

import argparse
import shlex

from .common import (add_drafter_arg, add_prompt_args, check_one_drafter_per_method, draft_lengths, folder_fault,
                     fraction, ints, method_list, non_negative, positive, seed_value, shipped_name)

NAME = "vllm-bench"
DRY_RUN_PORT = 8000   # what --dry-run prints; a real sweep picks a free port per server


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("vllm-bench",
                       help="tokens/s and acceptance of ar, eagle, peagle in real vLLM, over K and concurrency")
    s.add_argument("--methods", type=method_list, default=["ar", "eagle", "peagle"],
                   help="comma list of ar,eagle,peagle")
    s.add_argument("--k", type=draft_lengths, default=[3, 5, 7], help="draft lengths, e.g. 3,5,7 (one server each)")
    s.add_argument("--concurrency", type=ints, default=[1, 4], help="max requests in flight, e.g. 1,2,4,8")
    add_prompt_args(s)
    s.add_argument("--temperature", type=non_negative, default=0.0)
    s.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"],
                   help="vLLM --dtype (default: bfloat16 on a CUDA GPU, float32 on a CPU)")
    add_drafter_arg(s, "a folder or a Hugging Face id")
    s.add_argument("--target", default=None, help="HF folder or Hugging Face id vLLM serves "
                                                  "(default: the embedded SmolLM2, converted)")
    s.add_argument("--max-model-len", type=positive, default=2048)
    s.add_argument("--gpu-memory-utilization", type=fraction, default=None,
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
    s.add_argument("--seed", type=seed_value, default=0)
    s.add_argument("--json", default=None, help="also write the result to this file")
    return s


def validate(p: argparse.ArgumentParser, args) -> None:
    from pathlib import Path

    from ..serving.server import is_hub_id

    args.drafter = [(method, shipped_name(where)) for method, where in args.drafter]   # METHOD=NAME or =FOLDER
    check_one_drafter_per_method(p, args)
    for method, value in args.drafter:                  # a Hugging Face id passes; a missing local path does not
        fault = not is_hub_id(value) and folder_fault(value)
        if fault:
            p.error(f"--drafter {method}={fault} (nor a Hugging Face id owner/name)")
    if args.logs and args.prompts:
        from ..prompts import _set_path

        name, prompts = _set_path(args.prompts)
        ours = (Path(args.logs).expanduser() / "prompts.jsonl").resolve()      # what the sweep writes there
        if name is None and prompts.expanduser().resolve() == ours:
            p.error(f"--prompts {args.prompts} is where the sweep writes its own prompts.jsonl in --logs "
                    f"{args.logs}; keep your prompt file elsewhere or choose another --logs")


def run(args) -> int:
    from ..bench import write_json
    from ..info import collect
    from ..serving.bench import run_vllm_bench, sweep_plan, validate
    from ..serving.server import check_drafter_config, serve_command, server_env

    serving = dict(dtype=args.dtype, memory_fraction=args.gpu_memory_utilization, model_runner=args.model_runner,
                   enforce_eager=args.enforce_eager, device=args.device)   # None: the device's default
    drafters = dict(args.drafter)
    if args.dry_run:                       # the servers the sweep would start, one command each; starts nothing
        try:
            validate(args.methods, args.k, args.concurrency, args.num_prompts, args.max_new_tokens)
            _, plan = sweep_plan(methods=args.methods, ks=args.k, target=args.target,
                                 eagle_drafter=drafters.get("eagle"), peagle_drafter=drafters.get("peagle"),
                                 dspark_drafter=drafters.get("dspark"),
                                 max_model_len=args.max_model_len,
                                 **serving)
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
                                dspark_drafter=drafters.get("dspark"),
                                max_model_len=args.max_model_len, workdir=args.logs, seed=args.seed,
                                spread=args.spread, **serving)
    except (ValueError, FileNotFoundError) as err:
        raise SystemExit(f"peagle-lab vllm-bench: {err}") from None
    result["command"] = "peagle-lab " + " ".join(args.argv)
    result["info"] = collect(count_prompts=False)
    write_json(result, args.json)
    return 0
