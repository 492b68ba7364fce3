"""Generate benchmarks/RESULTS.md from the raw JSON in benchmarks/results/ (never edit RESULTS.md by hand).

RESULTS.md is one table per study: a row per current result with its headline figure (computed here from the
JSON, so every figure is traceable), the date, the machine, the command and links to the study page in docs/ and
to the raw file. The study pages explain the figures; git keeps the results they replaced.

    python benchmarks/make_results.py
"""
from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results"
COMMAND_CHARS = 180                      # longer commands are cut; the JSON holds them whole


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


def cuda_crosscheck(r: dict) -> str:
    worst = max(r["rows"], key=lambda x: abs(x["al_gap"]))
    return (f"AL gap <= {r['max_abs_al_gap']:.3f} over K 3/5/7 (largest: {worst['method']} K={worst['k']}, vLLM "
            f"{worst['vllm']['acceptance_length']:.3f} vs {worst['teaching_engine']['acceptance_length']:.3f})")


def data_scaling(r: dict) -> str:
    best = {m: max((x for x in r["rows"] if x["method"] == m), key=lambda x: x["al"]["7"]) for m in ("peagle", "eagle")}
    sizes = sorted({x["reply_tokens"] for x in r["rows"]})
    return (f"{len(r['rows'])} drafters, {sizes[0] / 1e6:.1f}M-{sizes[-1] / 1e6:.1f}M reply tokens; best AL K=7: "
            f"P-EAGLE {best['peagle']['al']['7']:.3f}, EAGLE-3 {best['eagle']['al']['7']:.3f}")


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


def notebooks(r: dict) -> str:
    return ", ".join(f"{x['notebook'][:2]} {x['result'].split(' ')[0]}" for x in r["notebooks"])


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


# (study, docs page, [(raw file, what it is, headline function or None)])
TOPICS = [
    ("Teaching engine (`peagle-lab bench`)", "teaching-engine-bench.md", [
        ("bench_cpu_mtbench.json", "AR, transformers, EAGLE-3 and P-EAGLE on CPU", bench),
        ("bench_cpu_batched.json", "the same, 4 requests decoded together", bench),
        ("bench_h200_mtbench.json", "the same code with the target on an H200", bench),
        ("gpu_engine_tests_h200.log", "the engine's oracle tests on CUDA", None)]),
    ("Serving in vLLM (`peagle-lab vllm-bench`)", "vllm-cpu-serving.md", [
        ("vllm_cpu_sweep.json", "CPU vLLM: method x K x concurrency, 12 spread MT-Bench prompts", vllm),
        ("vllm_cpu_sweep_first12.json", "the same sweep on the first 12 MT-Bench prompts (all writing)", vllm),
        ("vllm_cpu_crosscheck.json", "vLLM's drafts and acceptance against the teaching engine's", crosscheck),
        ("vllm_cpu_knobs.json", "server settings: thread binding, compilation", None),
        ("vllm_shared_head_probe.json", "vLLM serving a drafter that shares the target's output layer", None)]),
    ("CUDA vLLM on an H200", "vllm-cuda-serving.md", [
        ("vllm_cuda_h200_sweep.json", "K 3/5/7 x concurrency 1-64, 80 MT-Bench + 32 HumanEval prompts, bf16", vllm),
        ("vllm_cuda_crosscheck_h200.json", "vLLM's acceptance (bf16) against the teaching engine's (fp32), 256 tokens",
         cuda_crosscheck),
        ("replay_mtbench256_h200.json", "the shipped pair replayed on 80 MT-Bench prompts, 256 tokens", None),
        ("vllm_cuda_learned_mask_h200.json", "a learned-mask P-EAGLE head materialised and served, 128 tokens",
         learned_mask)]),
    ("Fast GPU engine (static caches, CUDA graphs, fused steps)", "fast-engine.md", [
        ("fast_engine_h200.json", "captured steps, K=1..8, bf16 and fp32, batch 1, with the step split", None),
        ("fused_engine_h200_pgraph_k3k7.json", "fastest default: compiled steps, Triton attention, prompt graphs",
         None),
        ("fused_engine_h200_pgraph_max_k5.json", "the same with inductor's max-autotune, K=5", None),
        ("fused_engine_h200_pgraph_max_k7.json", "the same with max-autotune, K=7", None),
        ("fused_engine_h200_pgraph_fp32.json", "float32: the lossless oracle on CUDA", None),
        ("fused_engine_h200_attention_k5.json", "compiled steps with SDPA vs the Triton cache attention, K=5", None),
        ("fused_engine_h200_attention_k7.json", "Triton attention and SDPA without cuDNN, plain and compiled, K=7",
         None),
        ("step_profile_h200_attention.json", "where a captured step's time goes, by kernel family", None),
        ("fused_engine_cpu.json", "the fusion lever on a 2-core CPU", None),
        ("fast_engine_tests_h200.log", "the fast engine's oracle tests on CUDA", None),
        ("fused_engine_tests_h200.log", "the compiled engine's and the cache attention's tests on CUDA", None)]),
    ("Batched decoding and the drafter's forward pass", "batched-decoding.md", [
        ("batch_rows_h200.json", "batched teaching engine at batch 8, 32, 64, bf16", None),
        ("batch_profile_h200_cudnn.json", "a batched step's time split with SDPA's cuDNN plans", None),
        ("drafter_forward_cudagraph_h200.json", "one parallel pass vs K sequential passes, CUDA graphs",
         drafter_forward),
        ("drafter_forward_h200.json", "the same, eager", drafter_forward),
        ("batch_engine_tests_h200.log", "the batched engine's and the kernel's tests on CUDA", None)]),
    ("Kernel", "kernel-timings.md", [
        ("kernel_h200.json", "the Triton input-layout kernel vs its torch reference and an empty launch", kernel),
        ("kernel_h200_fixed_launch.json", "the same before the launch shape followed the request length", kernel)]),
    ("Acceptance (replayed and measured)", "acceptance-by-category.md", [
        ("replay_acceptance_mtbench80.json", "AL on all 80 MT-Bench prompts, per category", replay),
        ("replay_acceptance_capacity.json", "AL of drafters above the shipping size limit", replay),
        ("replay_acceptance_humaneval40.json", "AL on 40 HumanEval prompts", replay),
        ("replay_eval_h200_mtbench40.json", "`peagle-lab eval` on an H200 (equals the CPU's)", replay),
        ("drafter_generalization.json", "agreement on training vs unseen text", None),
        ("gpu_eval_tests_h200.log", "`peagle-lab eval`'s oracle test on CUDA", None)]),
    ("Training runs", "training-runs.md", [
        ("train_shipped_pair_h200.json", "the shipped pair, trained side by side", train_runs),
        ("train_target_head_h200.json", "drafters through the target's output layer (full vocabulary)", train_runs),
        ("train_capacity_h200.json", "drafters above the shipping size limit", train_runs),
        ("train_objective_ab_h200.json", "training objective: KL vs cross-entropy on the top token", None),
        ("replay_acceptance_objective_ab.json", "AL of the objective fine-tunes", replay),
        ("data_stats.json", "the training data: size, loops, coverage", None),
        ("head_init_ab_cpu.json", "drafter head initialisation A/B on CPU", None)]),
    ("Training data at scale", "data-scaling.md", [
        ("data_scaling.json", "AL at K 3/5/7 against distinct reply tokens: one pass, its repeat, equal steps, shipped",
         data_scaling),
        ("data_scale_train_h200.json",
         "both drafters trained in one pass over 3.9M fresh reply tokens (training accuracy per depth)", None),
        ("data_scale_stream_h200.json", "the stream run: four vLLM engines regenerate while both drafters train in one "
         "pass (logs, train records, replays)", stream_run),
        ("data_scale_continue_h200.json", "its continuation on fresh data from the saved drafters: regeneration, then "
         "both drafters trained further (logs, train records, replays)", stream_run),
        ("data_scale_stopped_h200.json", "a stream run from zero that stopped when the machine went back (what its "
         "first call brought back)", None),
        ("data_scale_repeat_h100_a1.json", "the recipe again from zero, first allocation, on an 80 GB H100 with 700 s "
         "of device time: 322 s of regeneration beside both trainers, 525 s of training (`data_scale.py record`)",
         stream_run),
        ("data_scale_repeat_h100_a2.json", "its second allocation, on an 80 GB H100: resumed from the carry folders, "
         "720 s of regeneration on new seeds beside both trainers, 1,390 s of training (`data_scale.py record`)",
         stream_run),
        ("data_scale_repeat_h100_a3.json", "its third allocation, on an 80 GB H100: resumed from the carry folders, "
         "720 s of regeneration on new seeds beside both trainers, 1,460 s of training, one micro-batch a step once "
         "the engines were done (`data_scale.py record`)", stream_run),
        ("data_scale_repeat_h200_a4.json", "its fourth allocation, resumed from the carry folders on a round of new "
         "seeds (`data_scale.py record`)", stream_run),
        ("data_scale_repeat_h100_a4.json", "its fourth allocation, on an 80 GB H100, resumed from the carry folders on "
         "a round of new seeds (`data_scale.py record`)", stream_run),
        ("carry_tests_h200.log", "the carry-folder and resume tests with the trainer on CUDA", None),
        ("regen_throughput_h200.json", "regeneration throughput on an H200", regen_throughput),
        ("vllm_cpu_crosscheck_peagle_40M.json", "the 39.8M P-EAGLE (4 layers, learned mask row) in vLLM's CPU build "
         "against the teaching engine", drafter_crosscheck),
        ("vllm_cpu_crosscheck_eagle_42M.json", "the 42.4M EAGLE-3 in vLLM's CPU build against the teaching engine",
         drafter_crosscheck),
        ("vllm_cpu_crosscheck_peagle_54M.json", "the repeat's 53.6M P-EAGLE in vLLM's CPU build against the teaching "
         "engine", drafter_crosscheck),
        ("vllm_cpu_crosscheck_eagle_52M.json", "the repeat's 52.1M EAGLE-3 in vLLM's CPU build against the teaching "
         "engine", drafter_crosscheck)]),
    ("Training speed and memory", "training-speed-and-memory.md", [
        ("train_step_grouped_h200.json", "a training step with batches grouped by length", None),
        ("train_step_cudnn_h200.json", "a training step with and without cuDNN attention", None),
        ("train_step_h200.json", "a training step with the target's pass in fp32 vs bf16", None),
        ("train_step_batch_h200.json", "the data-scaling pair's training step at batch 64 to 512: reply tokens/s",
         train_step_batch),
        ("train_memory_h200.json", "sequence partitioning at 8B scale: memory and step time", train_memory),
        ("flex_cuda_tests_h200.log", "the flex-attention gradient test on CUDA", None)]),
    ("P-EAGLE recipe and its ablation", "peagle-recipe.md", [
        ("ablation_135m.json", "the ablation table: AL per lever, arms trained side by side", ablation),
        ("ablation_eval_mask_token.json", "mask-token arms and EAGLE-3 at the same budget", replay_by_k),
        ("recipe_mask_token_h200.json", "their training: four arms on 4,119 multi-turn samples", None),
        ("ablation_eval_noise_data.json", "feature noise, data size, the shipped pair fine-tuned", replay_by_k),
        ("recipe_noise_data_h200.json", "their training", None),
        ("ablation_eval_epochs.json", "the recipe and EAGLE-3 for ~20 epochs", replay_by_k),
        ("recipe_epochs_h200.json", "their training", None),
        ("ablation_eval_sampled_data.json", "both on greedy plus two sampled replies a turn", replay_by_k),
        ("recipe_sampled_data_h200.json", "their training", None),
        ("recipe_small_shards_h200.json", "regeneration in shards of 128 conversations, one arm on 455 samples",
         None)]),
    ("Several GPUs (DDP)", "training.md", [
        ("ddp_tests_h200_1gpu.json", "all-reduced gradients of 2 processes vs one process (one H200, gloo)", None),
        ("ddp_tests_h200_1gpu.log", "the test log", None)]),
    ("Notebooks on a GPU", "gpu-recipe.md", [
        ("notebooks_cuda_h200.json", "notebooks 01-04 under nbmake with device=cuda", notebooks),
        ("notebooks_cuda_h200.log", "the nbmake log", None)]),
]

FUSED = {"fast_engine_h200.json", "fused_engine_cpu.json"} | {n for _, _, rows in TOPICS for n, _, _ in rows
                                                               if n.startswith("fused_engine_") and n.endswith(".json")}


def headline(name: str, r: dict, fn) -> str:
    if name in FUSED:
        return speed(r["results"])
    if name == "batch_rows_h200.json":
        return bench(r)
    return fn(r) if fn else ""


def _command(r: dict) -> str:
    """The command that made a result, without the GGUF re-assembly prefix of the GPU scripts, cut to length."""
    cmd = r.get("command") or (r.get("commands") or [None])[0] or r.get("script")
    if not cmd:
        return "the JSON's `device_calls`" if "device_calls" in r else "-"
    cmd = re.sub(r"^G=\S+; \[ -f \$G \] \|\| cat [^;]+; ", "", str(cmd)).replace("|", "\\|").replace("`", "'")
    return f"`{cmd[:COMMAND_CHARS]}`" + (" (cut)" if len(cmd) > COMMAND_CHARS else "")


def _machine(r: dict) -> str:
    dev = r.get("gpu") or r.get("device")
    m = str(dev if isinstance(dev, str) else r.get("machine") or "-")
    if m.startswith("replay"):                       # acceptance replays: CPU, whatever trained the drafters
        return "CPU"
    return "NVIDIA H200" if "H200" in m else ("CPU" if re.search(r"CPU|vm", m) else m)


def render() -> str:
    """RESULTS.md's text, from the files in results/."""
    listed = {n for _, _, rows in TOPICS for n, _, _ in rows}
    present = {p.name for p in RESULTS.iterdir() if p.is_file()}
    other = sorted(n for n in present - listed if n.endswith(".json"))
    out = ["# Benchmark results", "",
           "Generated by `python benchmarks/make_results.py` from the raw files in [`results/`](results/) (never edit "
           "this file by hand). One row per current result: its headline figure, computed from the raw JSON; the date, "
           "machine and command that made it; the study page in [`docs/`](../docs/README.md) that explains it. Results "
           "a later one replaced are in git history. To rerun the GPU rows on your own GPU, see "
           "[`gpu/README.md`](gpu/README.md). tok/s: generated tokens per second; AL: acceptance length; P/E: best "
           "P-EAGLE over best EAGLE-3 tokens/s ([glossary](../docs/glossary.md)).", ""]
    for title, page, rows in TOPICS + ([("Other results", None, [(n, "", None) for n in other])] if other else []):
        rows = [row for row in rows if row[0] in present]
        if not rows:
            continue
        out += [f"## {title}", ""] + ([f"Study: [`docs/{page}`](../docs/{page})", ""] if page else [])
        out += ["| result | headline | date | machine | command |", "|---|---|---|---|---|"]
        for name, what, fn in rows:
            link = f"[`{name}`](results/{name})"
            if not name.endswith(".json"):
                out.append(f"| {link}: {what} | | | | |")
                continue
            r = json.loads((RESULTS / name).read_text())
            date = str(r.get('date', '-'))[:10]
            out.append(f"| {link}: {what or r.get('what', '')} | {headline(name, r, fn)} | {date} | "
                       f"{_machine(r)} | {_command(r)} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    (HERE / "RESULTS.md").write_text(render())
    print(f"wrote {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
