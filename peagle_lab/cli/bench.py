"""``peagle-lab bench``: tokens/s and acceptance of ar, hf, eagle and peagle on the same prompts
(:func:`peagle_lab.bench.run_bench`)."""
from __future__ import annotations

import argparse

from .common import (above_zero, add_drafter_arg, add_prompt_args, check_drafter_folders, check_one_drafter_per_method,
                     device_name, draft_lengths, ints, method_list, non_negative, seed_value, shipped_name)

NAME = "bench"


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("bench", help="tokens/s and acceptance of ar, hf, eagle, peagle on the same prompts")
    s.add_argument("--methods", type=method_list, default=["ar", "hf", "eagle", "peagle"],
                   help="comma list of ar,hf,eagle,peagle")
    s.add_argument("--k", type=draft_lengths, default=[3, 5, 7], help="draft lengths, e.g. 3,5,7")
    add_prompt_args(s)
    s.add_argument("--temperature", type=non_negative, default=0.0)
    add_drafter_arg(s)
    s.add_argument("--target", default=None)
    s.add_argument("--seed", type=seed_value, default=0)
    s.add_argument("--batch-size", type=ints, default=[1],
                   help="requests decoded together (greedy only), e.g. 1,4; tokens/s counts all of them")
    s.add_argument("--device", type=device_name, default="auto", help="auto (CUDA when present), cpu or cuda")
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
    s.add_argument("--time-budget", type=above_zero, default=None, metavar="SECONDS",
                   help="start no new round of prompts after this many seconds (loading included); rows report the "
                        "prompts actually run (a round is lcm(batch sizes) prompts; the first always runs)")
    s.add_argument("--hbm-gbps", type=above_zero, default=4800.0,
                   help="memory bandwidth (GB/s) for the memory floor on CUDA (default: H200, 4800)")
    s.add_argument("--json", default=None, help="also write the result to this file")
    return s


def validate(p: argparse.ArgumentParser, args) -> None:
    args.drafter = [(method, shipped_name(where)) for method, where in args.drafter]   # METHOD=NAME or =FOLDER
    check_one_drafter_per_method(p, args)
    check_drafter_folders(p, [(f"--drafter {m}=", d) for m, d in args.drafter])


def run(args) -> int:
    from ..bench import BenchSpec, run_bench, write_json
    from ..engines.fast import FastConfig
    from ..info import collect

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
