"""Generate benchmarks/RESULTS.md from the raw JSON in benchmarks/results/ (never edit RESULTS.md by hand).

RESULTS.md is a record: one row per figure that the README, the notebooks or docs/ quote, with its headline
(computed here from the raw JSON, so every figure is traceable), the page that explains it, the raw files and the
one command that reruns it on your own CPU or GPU (a script in benchmarks/, a thin wrapper over `peagle-lab`).
Each raw file also keeps the exact command that made it. Git keeps the results these replaced.

    python benchmarks/make_results.py
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results"


def _f(x, fmt=".2f") -> str:
    return "-" if x is None else format(x, fmt)


def _best(rows: list[dict], method: str) -> dict | None:
    return max((x for x in rows if x["method"] == method), key=lambda x: x["tokens_per_s"], default=None)


def speed(rows: list[dict]) -> str:
    """AR, best EAGLE-3 and best P-EAGLE tokens/s (K and AL), and P-EAGLE / EAGLE-3."""
    ar = _best(rows, "ar") or _best(rows, "none")
    e, p = _best(rows, "eagle"), _best(rows, "peagle")
    parts = [f"AR {ar['tokens_per_s']:.0f} tok/s"] if ar else []
    parts += [f"{name} {x['tokens_per_s']:.0f} (K={x['k']}, AL {_f(x.get('acceptance_length'))})"
              for name, x in (("EAGLE-3", e), ("P-EAGLE", p)) if x]
    if e and p:
        parts.append(f"**P/E {p['tokens_per_s'] / e['tokens_per_s']:.2f}x**")
    return "; ".join(parts)


def bench(r: dict) -> str:
    """Teaching engine: batch 1, and the largest batch when there are several."""
    sizes = sorted({x.get("batch_size", 1) for x in r["results"]})
    return " / ".join(f"batch {b}: " + speed([x for x in r["results"] if x.get("batch_size", 1) == b])
                      for b in sizes[:1] + sizes[1:][-1:])


def vllm(r: dict) -> str:
    """A vLLM sweep at its lowest and highest concurrency (CUDA: MT-Bench, every method on one model runner)."""
    rows = [x for x in r["results"] if x.get("prompts", "mt-bench") == "mt-bench" and x.get("runner", "v1") == "v1"]
    cs = sorted({x["concurrency"] for x in rows})
    return " / ".join(f"c={c}: " + speed([x for x in rows if x["concurrency"] == c]) for c in (cs[0], cs[-1]))


def replay(r: dict) -> str:
    """AL per drafter (greedy replay)."""
    res = r["results"]
    return ", ".join(f"{k} {v['acceptance_length']:.2f}" for k, v in res.items()) + f" (K={r['settings']['k']})"


def replay_by_k(r: dict) -> str:
    """AL at K=7 per arm (benchmarks/ablation_eval.py)."""
    return ", ".join(f"{k} {v['acceptance_length']:.2f}" for k, v in r["results_by_k"]["7"].items()) + " (K=7)"


def ablation(r: dict) -> str:
    levers = {row["lever"] for row in r["rows"]}
    return f"{len(r['rows'])} arms over {len(levers)} levers, AL at K=7 on 80 MT-Bench prompts"


def kernel(r: dict) -> str:
    """The kernel against its torch reference at the largest batch of requests."""
    n = max(row["num_reqs"] for row in r["rows"])
    x = [row["speedup_vs_torch"] for row in r["rows"] if row["num_reqs"] == n]
    return f"{n} requests: Triton kernel {min(x):.0f}-{max(x):.0f}x its torch reference"


def drafter_forward(r: dict) -> str:
    """One parallel pass against K sequential passes, at batch 1 and the largest K."""
    row = max((x for x in r["rows"] if x["B"] == 1), key=lambda x: x["K"])
    return (f"B=1, K={row['K']}: parallel {row['parallel_ms']:.2f} ms, sequential {row['sequential_ms']:.2f} ms "
            f"(**{row['sequential_over_parallel']:.1f}x**)")


def crosscheck(r: dict) -> str:
    return (f"vLLM AL {r['vllm']['acceptance_length']:.3f} = teaching engine "
            f"{r['teaching_engine']['acceptance_length']:.3f} (K={r['k']}); greedy identical: "
            f"{r['greedy_vllm_identical_to_teaching_engine']}")


def drafter_crosscheck(r: dict) -> str:
    return (f"vLLM AL {r['vllm']['acceptance_length']:.3f}, teaching engine "
            f"{r['teaching_engine']['acceptance_length']:.3f} (K={r['k']}); largest gap per position "
            f"{r['max_abs_gap_per_position']:.3f}; greedy output unchanged: {r['vllm']['identical_to_ar']}")


def learned_mask(r: dict) -> str:
    name, c1 = r["drafter"]["name"], r["serve"]["results"][0]
    ours = r["replay"]["by_k"][str(c1["k"])][name]["acceptance_length"]
    return f"vLLM AL {c1['acceptance_length']:.3f} vs teaching engine {ours:.3f} (K={c1['k']}, concurrency 1)"


def per_position_picture(r: dict) -> str:
    """The README's picture: vLLM's AL of the shipped pair at K=7, concurrency 1, MT-Bench, V1 runner."""
    row = {x["method"]: x for x in r["results"] if x["k"] == 7 and x["concurrency"] == 1
           and x.get("prompts") == "mt-bench" and x.get("runner") == "v1"}
    return (f"K=7, c=1, {r['settings']['max_new_tokens']} tokens: EAGLE-3 AL {row['eagle']['acceptance_length']:.2f}, "
            f"P-EAGLE AL {row['peagle']['acceptance_length']:.2f}, per position drawn from the sweep above")


def cuda_crosscheck(r: dict) -> str:
    worst = max(r["rows"], key=lambda x: abs(x["al_gap"]))
    return (f"AL gap <= {r['max_abs_al_gap']:.3f} over K 3/5/7 (largest: {worst['method']} K={worst['k']}, vLLM "
            f"{worst['vllm']['acceptance_length']:.3f} vs {worst['teaching_engine']['acceptance_length']:.3f})")


def data_scaling(r: dict) -> str:
    """The one-pass drafters' best AL at K=7 and the gap between the methods at 2M and 50M (the repeat)."""
    one = [x for x in r["rows"] if x["series"].startswith("one pass") and "short" not in x["series"]]
    best = {m: max((x for x in one if x["method"] == m), key=lambda x: x["al"]["7"]) for m in ("peagle", "eagle")}
    rep = {(x["method"], round(x["reply_tokens"] / 1e6)): x["al"]["7"] for x in r["rows"]
           if x["series"] == "one pass, repeat"}
    gap = {n: rep[("eagle", n)] - rep[("peagle", n)] for n in (2, 50)}
    return (f"one pass, best AL K=7: P-EAGLE {best['peagle']['al']['7']:.3f} at "
            f"{best['peagle']['reply_tokens'] / 1e6:.1f}M, EAGLE-3 {best['eagle']['al']['7']:.3f} at "
            f"{best['eagle']['reply_tokens'] / 1e6:.1f}M reply tokens; gap {gap[2]:.2f} (2M) -> {gap[50]:.2f} (50M)")


def stream_run(r: dict) -> str:
    t = r["train"]
    seen = {m: max(x["reply_tokens"] for x in t[m]["rows"]) for m in t}
    return (f"{t['peagle']['reply_tokens'] / 1e6:.1f}M reply tokens in the pool; seen by the end, one pass: P-EAGLE "
            f"{seen['peagle'] / 1e6:.1f}M, EAGLE-3 {seen['eagle'] / 1e6:.1f}M")


def regen_throughput(r: dict) -> str:
    ab = r["ab"]
    alone = r.get("four_engines_alone", {}).get("steady_reply_tokens_per_s")
    return (f"vLLM {ab['vllm']['tokens_per_s']:,.0f} vs transformers {ab['transformers']['tokens_per_s']:,.0f}"
            f" tok/s (same prompts); 4 engines turn by turn: {r['four_engines']['steady_reply_tokens_per_s']:,.0f} "
            f"reply tok/s steady beside two trainers" + (f", {alone:,.0f} alone" if alone else ""))


def train_runs(r: dict) -> str:
    """The drafters a training run produced: name, method, layers."""
    return ", ".join(f"{x['name']} ({x.get('method', '?')} {x.get('num_layers', '?')}L)" for x in r["runs"])


def train_step_batch(r: dict) -> str:
    best = {m: max((x for x in r["rows"] if x["method"] == m and "reply_tokens_per_s" in x),
                   key=lambda x: x["reply_tokens_per_s"]) for m in ("peagle", "eagle")}
    at64 = {m: next(x for x in r["rows"] if x["method"] == m and x["batch_size"] == 64) for m in best}
    return "; ".join(f"{name}: {at64[m]['reply_tokens_per_s'] / 1e3:.0f}K reply tok/s at batch 64, best "
                     f"{best[m]['reply_tokens_per_s'] / 1e3:.0f}K at {best[m]['batch_size']}"
                     for m, name in (("peagle", "P-EAGLE"), ("eagle", "EAGLE-3")))


def train_memory(r: dict) -> str:
    ok = [row for row in r["rows"] if row.get("ok")]
    top = max(ok, key=lambda row: row["tokens"])
    return (f"longest sequence that fits: {top['tokens']:,} tokens ({top['segments']} segments, "
            f"{top['peak_gib']:.0f} GiB peak)")


def dspark_replay(r: dict) -> str:
    by = r["by_k"]["7"]
    names = ("dspark", "dflash", "peagle", "eagle")
    return ("AL at K=7: " + ", ".join(f"{n} {by[n]['acceptance_length']:.2f}" for n in names)
            + " (dflash: the same backbone, Markov head off)")


def dspark_serving(r: dict) -> str:
    from statistics import median
    c1 = {}
    for row in r["results"]:
        if row["concurrency"] == 1 and row["run"].startswith("c1-r"):
            c1.setdefault(row["config"], []).append(row["tokens_per_s"])
    best_ar = max(median(v) for k, v in c1.items() if k.startswith("ar-"))
    return ("c=1 tok/s median (min-max), x best AR: " + "; ".join(
        f"{k} {median(v):.0f} ({min(v):.0f}-{max(v):.0f}) {median(v) / best_ar:.2f}x" for k, v in sorted(c1.items())))


def speed_of(r: dict) -> str:
    return speed(r["results"])


# (figure, docs page, raw files (the first gives the headline), headline function or None, the command)
FIGURES = [
    ("Teaching engine, 2-core CPU", "teaching-engine-bench.md", ["bench_cpu_mtbench.json"], bench,
     "python benchmarks/teaching_engine_bench.py --device cpu"),
    ("Teaching engine, H200", "teaching-engine-bench.md", ["bench_h200_mtbench.json"], bench,
     "python benchmarks/teaching_engine_bench.py --device cuda"),
    ("Batched teaching engine, CPU", "batched-decoding.md", ["bench_cpu_batched.json"], bench,
     "python benchmarks/batched_bench.py --device cpu"),
    ("Batched teaching engine, H200", "batched-decoding.md", ["batch_rows_h200.json", "batch_profile_h200_cudnn.json"],
     bench, "python benchmarks/batched_bench.py --device cuda --batch-sizes 1,8,32,64 --k 3 --num-prompts 64 "
     "--max-new-tokens 128 --dtype bfloat16"),
    ("One parallel drafter pass vs K sequential", "batched-decoding.md",
     ["drafter_forward_cudagraph_h200.json", "drafter_forward_h200.json"], drafter_forward,
     "python benchmarks/bench_drafter_forward.py --compile cudagraph --json out/drafter_forward.json"),
    ("Fast engine, captured steps (H200)", "fast-engine.md", ["fast_engine_h200.json"], speed_of,
     "python benchmarks/fast_engine.py --k 1,2,3,4,5,6,7,8"),
    ("Fast engine, fused steps + prompt graphs (H200)", "fast-engine.md",
     ["fused_engine_h200_pgraph_k3k7.json", "fused_engine_h200_pgraph_max_k5.json",
      "fused_engine_h200_pgraph_max_k7.json", "fused_engine_h200_pgraph_fp32.json",
      "fused_engine_h200_attention_k5.json", "fused_engine_h200_attention_k7.json"],
     speed_of, "python benchmarks/fast_engine.py --compile default"),
    ("Fast engine on a CPU", "fast-engine.md", ["fused_engine_cpu.json"], speed_of,
     "python benchmarks/fast_engine.py --device cpu --dtype float32 --compile default"),
    ("Where a captured step's time goes (H200)", "fast-engine.md", ["step_profile_h200_attention.json"], None,
     "python benchmarks/gpu/step_profile.py --out out/step_profile.json --modes plain,default,default+triton --k 5"),
    ("Triton kernel vs torch reference (H200)", "kernel-timings.md",
     ["kernel_h200.json", "kernel_h200_fixed_launch.json"],
     kernel, "python benchmarks/bench_kernel.py --json out/kernel.json"),
    ("AL of the shipped pair, 80 MT-Bench prompts", "acceptance-by-category.md", ["replay_acceptance_mtbench80.json"],
     replay, "python benchmarks/acceptance.py"),
    ("AL of the shipped pair, 40 HumanEval problems", "acceptance-by-category.md",
     ["replay_acceptance_humaneval40.json"], replay,
     "python benchmarks/acceptance.py --prompts humaneval --num-prompts 40 --spread 1"),
    ("Replay on an H200 equals the CPU's", "training.md", ["replay_eval_h200_mtbench40.json"], replay,
     "python benchmarks/acceptance.py --device cuda --num-prompts 40 --spread 1"),
    ("The shipped pair's training", "drafter-levers.md", ["train_shipped_pair_h200.json"], train_runs,
     "python benchmarks/shipped_pair.py --work runs/shipped"),
    ("Vocabulary and size levers", "drafter-levers.md",
     ["replay_acceptance_capacity.json", "train_capacity_h200.json", "train_target_head_h200.json",
      "vllm_shared_head_probe.json"], replay,
     "peagle-lab train --preset peagle --num-layers 4 --set intermediate_size=1536 --set share_lm_head=true "
     "--data runs/shipped/mix --max-minutes 20 --out runs/cap --export runs/peagleL4 && python "
     "benchmarks/replay_acceptance.py --k 7 --num-prompts 80 --max-new-tokens 128 peagleL4=runs/peagleL4"),
    ("Training objective (the A/B's option has since been removed)", "drafter-levers.md",
     ["replay_acceptance_objective_ab.json", "train_objective_ab_h200.json"], replay,
     "python benchmarks/replay_acceptance.py --k 7 --num-prompts 80 --max-new-tokens 128 peagle=peagle-smollm2"),
    ("Data loops and held-out agreement", "drafter-levers.md", ["data_stats.json", "drafter_generalization.json"],
     None, "python benchmarks/data_stats.py greedy=runs/shipped/data:256 sampled=runs/shipped/data-t07:384 "
     "--json out/data_stats.json"),
    ("Data-scaling curve", "data-scaling.md", ["data_scaling.json"], data_scaling,
     "python benchmarks/data_scaling.py --work runs/scale --seeds 8"),
    ("Regeneration speed, vLLM vs transformers", "data-scaling.md", ["regen_throughput_h200.json"], regen_throughput,
     "python benchmarks/regen_throughput.py --work runs/regen"),
    ("Served acceptance equals the teaching engine's (vLLM CPU)", "vllm-cpu-serving.md",
     ["vllm_cpu_crosscheck.json", "vllm_cpu_crosscheck_peagle_54M.json", "vllm_cpu_crosscheck_eagle_52M.json"],
     crosscheck, "python benchmarks/vllm_cpu_crosscheck.py --drafter peagle=peagle-smollm2 --k 5 --num-prompts 4"),
    ("vLLM CPU sweep over method, K and concurrency", "vllm-cpu-serving.md",
     ["vllm_cpu_sweep.json", "vllm_cpu_sweep_first12.json", "vllm_cpu_knobs.json"], vllm,
     "python benchmarks/vllm_cpu_sweep.py"),
    ("CUDA vLLM sweep (H200)", "vllm-cuda-serving.md", ["vllm_cuda_h200_sweep.json"], vllm,
     "python benchmarks/vllm_cuda_bench.py"),
    ("README picture: acceptance per draft position in vLLM (H200)", "vllm-cuda-serving.md",
     ["vllm_cuda_h200_sweep.json"], per_position_picture, "python benchmarks/readme_figure.py"),
    ("CUDA vLLM acceptance equals the teaching engine's (H200)", "vllm-cuda-serving.md",
     ["vllm_cuda_crosscheck_h200.json", "replay_mtbench256_h200.json", "vllm_cuda_learned_mask_h200.json"],
     cuda_crosscheck, "python benchmarks/vllm_cuda_crosscheck.py"),
    ("Training step speed (H200)", "training-speed-and-memory.md",
     ["train_step_batch_h200.json", "train_step_h200.json", "train_step_cudnn_h200.json",
      "train_step_grouped_h200.json"],
     train_step_batch, "python benchmarks/bench_train_step.py --recipe data-scale --batch 64,128,256,512 --steps 12 "
     "--configs peagle:bf16:grouped,eagle:bf16:grouped --json out/train_step.json"),
    ("Training memory at 8B scale (H200)", "training-speed-and-memory.md", ["train_memory_h200.json"], train_memory,
     "python benchmarks/bench_train_memory.py --lengths 2048,8192,16384,32768 --segments 1,4,8,16 "
     "--attention dense,flex --repeats 2"),
    ("The P-EAGLE recipe's ablation", "peagle-recipe.md",
     ["ablation_135m.json", "ablation_eval_mask_token.json", "ablation_eval_noise_data.json",
      "ablation_eval_epochs.json",
      "ablation_eval_sampled_data.json", "recipe_mask_token_h200.json", "recipe_noise_data_h200.json",
      "recipe_epochs_h200.json", "recipe_sampled_data_h200.json", "recipe_small_shards_h200.json"], ablation,
     "python benchmarks/ablation.py --json out/ablation_135m.json"),
    ("DSpark beside the shipped pair, 80 MT-Bench prompts", "dspark.md", ["dspark_eval_mtbench80.json"],
     dspark_replay, "python benchmarks/dspark.py eval"),
    ("DSpark in CUDA vLLM 0.26 (H100), c=1 x3 interleaved", "dspark.md",
     ["dspark_vllm_cuda_h100.json", "vllm_cpu_dspark_refusal.json"], dspark_serving,
     "python benchmarks/dspark.py serve"),
    ("Two processes' gradient equals one's (DDP, H200)", "training.md", ["ddp_tests_h200_1gpu.json"], None,
     "PEAGLE_TEST_DEVICE=cuda python -m pytest -q tests/test_trainer.py -k 'two_process or init_distributed'"),
]


def render() -> str:
    lines = ["# Recorded results", "",
             "One row per figure the README, the notebooks or [docs/](../docs/README.md) quote. *Rerun* is the one "
             "command that remakes it on your own machine (from the repository root, after `make setup`; GPU rows "
             "need a CUDA build of torch); each raw file also holds the exact command, date and machine that made "
             "it. Generated by `python benchmarks/make_results.py`: edit that, not this file.", "",
             "| figure | headline | raw | rerun |", "|---|---|---|---|"]
    for title, page, files, fn, command in FIGURES:
        raw = json.loads((RESULTS / files[0]).read_text())
        head = fn(raw) if fn else ""
        links = ", ".join(f"[{i + 1}](results/{name})" for i, name in enumerate(files))
        lines.append(f"| [{title}](../docs/{page}) | {head} | {links} | `{command}` |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    (HERE / "RESULTS.md").write_text(render())
    print(f"wrote {HERE / 'RESULTS.md'}")
