"""Write the recorded results the notebooks plot (peagle_lab/recorded/*.json) from benchmarks/results/.

The package ships only these small curated files, so a notebook outside a checkout (Colab, a
plain `pip install`) plots the same figures; `peagle_lab.recorded.load(name)` reads them. Each file
keeps only the fields a plot needs, plus `source` (the raw JSON it came from, with its date,
machine and command). Rerun after a raw result changes: `python benchmarks/make_recorded.py`.
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results"
OUT = HERE.parent / "peagle_lab" / "recorded"


def _raw(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _replay(name: str, labels: dict[str, str], fields: tuple[str, ...]) -> dict:
    """Replayed acceptance of several drafters on the same greedy MT-Bench replies."""
    r = _raw(name)
    return {"source": f"benchmarks/results/{name}", "k": r["settings"]["k"], "prompts": r["settings"]["prompts"],
            "num_prompts": r["settings"]["num_prompts"], "max_new_tokens": r["settings"]["max_new_tokens"],
            "drafters": {label: {f: r["results"][key][f] for f in fields if f in r["results"][key]}
                         for key, label in labels.items()}}


def acceptance_by_category() -> dict:
    return _replay("replay_acceptance_mtbench80.json",
                   {"run5-eagle": "EAGLE-3 (shipped)", "run5-peagle3": "P-EAGLE (shipped)",
                    "run6-eagleS": "EAGLE-3, target's head", "run6-peagleS": "P-EAGLE 4 layers, target's head"},
                   ("method", "acceptance_length", "acceptance_length_by_category"))


def drafter_size() -> dict:
    rec = _replay("replay_acceptance_capacity.json",
                  {"eagle-shipped": "EAGLE-3 (shipped)", "peagle-shipped": "P-EAGLE (shipped)", "eagleS": "eagleS",
                   "peagleS": "peagleS", "eagleL2": "eagleL2", "peagleL2": "peagleL2", "peagleL4": "peagleL4"},
                  ("method", "shape", "drafter_bytes", "acceptance_length", "agreement_all_positions"))
    rec["shipping_limit_mib"] = 16
    return rec


def objective_ab() -> dict:
    rec = _replay("replay_acceptance_objective_ab.json",
                  {"run5-peagle3": "P-EAGLE (shipped)", "ft-kl-peagle": "fine-tuned, KL objective",
                   "ft-argmaxce-peagle": "fine-tuned, argmax cross-entropy"},
                  ("method", "acceptance_length", "acceptance_per_position"))
    return rec


def train_memory_8b() -> dict:
    r = _raw("train_memory_h200.json")
    d = r["drafter"]
    keep = ("tokens", "elements", "segments", "attention", "ok", "peak_gib", "step_s")
    return {"source": "benchmarks/results/train_memory_h200.json", "device": r["machine"], "dtype": r["dtype"],
            "drafter": {k: d[k] for k in ("hidden_size", "num_layers", "draft_vocab_size", "trained_depth")},
            "rows": [{k: row.get(k) for k in keep} for row in r["rows"]]}


def kernel_timings() -> dict:
    r = _raw("kernel_h200.json")
    keep = ("num_reqs", "k", "with_prefill", "triton_ms", "torch_ref_ms", "empty_launch_ms", "triton_graph_ms",
            "empty_graph_ms", "speedup_vs_torch", "x_launch_floor", "graph_x_floor")
    return {"source": "benchmarks/results/kernel_h200.json", "device": r["device"],
            "rows": [{k: row[k] for k in keep} for row in r["rows"]]}


def gpu_speed() -> dict:
    """The fast engine (static caches, CUDA graphs) at batch 1: tokens/s, AL and the step's time split per
    method and K."""
    r = _raw("fast_engine_h200.json")
    keep = ("method", "k", "dtype", "tokens_per_s", "acceptance_length", "identical_to_ar", "step_split_ms")
    hf = [x for x in r.get("references", []) if x.get("method") == "hf-static"]
    return {"source": "benchmarks/results/fast_engine_h200.json", "device": r["machine"],
            "settings": r["settings"], "rows": [{k: row.get(k) for k in keep} for row in r["results"]],
            "floors": {run: v["floors"] for run, v in r["runs"].items() if "floors" in v},
            "transformers_static_cache_tokens_per_s": hf[0]["tokens_per_s"] if hf else None,
            "compiled": fused_pairs(), "best": best_engine(), "step_profile": step_profile()}


def step_profile() -> dict:
    """Where a captured step's time goes (bf16, K=5): kernel time by family against the graph's replay time, with
    SDPA (plain, compiled) and with the Triton cache attention (compiled); the prompt's eager pass apart."""
    r = _raw("step_profile_h200_attention.json")
    rows, prompt = [], {}
    for row in r["rows"]:
        if "error" in row:
            continue
        if row["step"] == "prefill":                   # ~20 ms, eager: kept apart from the captured steps' chart
            prompt[row["mode"]] = {k: row.get(k) for k in ("prompt_tokens", "replay_ms", "kernel_ms_per_step",
                                                           "unseen_length_ms", "unseen_length_ms_without_cudnn_sdpa")}
            continue
        fam = row.get("by_family_corrected") or row["by_family"]
        att = sum(v["ms_per_step"] for f, v in fam.items() if f.startswith("attention"))
        mm = sum(v["ms_per_step"] for f, v in fam.items() if f.startswith("matmul"))
        rows.append({"mode": row["mode"], "method": row["method"], "step": row["step"],
                     "kernels": row["kernels_per_step"], "replay_ms": row["replay_ms"], "attention_ms": att,
                     "matmul_ms": mm, "other_ms": row["kernel_ms_per_step"] - att - mm})
    return {"source": "benchmarks/results/step_profile_h200_attention.json", "settings": r["settings"], "rows": rows,
            "prompt_pass": prompt}


_SIDE = ("tokens_per_s", "decode_tokens_per_s", "prefill_ms_per_prompt", "acceptance_length", "identical_to_ar",
         "step_split_ms", "num_prompts")


def fused_pairs() -> dict:
    """The levers side by side in one run (bf16, batch 1, K=5): plain captured steps, the same fused by torch.compile,
    and fused with the Triton cache attention."""
    r = _raw("fused_engine_h200_attention_k5.json")
    rows = {}
    for x in r["results"]:
        side = {"part_plain": "plain", "part_fused_k5": "compiled",
                "part_fused_triton_k5": "compiled+triton"}[x["part"]]
        row = rows.setdefault((x["method"], x["k"]), {"method": x["method"], "k": x["k"]})
        row[side] = {k: x.get(k) for k in _SIDE}
    return {"source": "benchmarks/results/fused_engine_h200_attention_k5.json", "settings": r["settings"],
            "sides": ["plain", "compiled", "compiled+triton"], "rows": list(rows.values())}


def best_engine() -> dict:
    """The fastest configuration measured with the default compile (compiled steps, Triton cache attention, the
    prompt's pass in captured 64-token buckets) beside the plain engine of the same run, K=3 and 7, bf16, batch 1;
    and the same with inductor's max-autotune mode (K=5 and 7, one call each, each beside its own plain AR)."""
    name = "fused_engine_h200_pgraph_k3k7.json"
    r = _raw(name)
    keep = [x for x in r["results"] if x["part"] == "part_plain" or x["part"].endswith(("pgraph_k3", "pgraph_k7"))]
    auto = []
    for f in ("fused_engine_h200_pgraph_max_k5.json", "fused_engine_h200_pgraph_max_k7.json"):
        for x in _raw(f)["results"]:
            auto.append(dict({k: x.get(k) for k in _SIDE}, method=x["method"], k=x["k"],
                             source=f"benchmarks/results/{f}",
                             side="plain" if x["part"] == "part_plain" else "max-autotune", warmup_s=x.get("warmup_s")))
    return {"source": f"benchmarks/results/{name}", "settings": r["settings"],
            "rows": [dict({k: x.get(k) for k in _SIDE}, method=x["method"], k=x["k"],
                          side="plain" if x["part"] == "part_plain" else "fast") for x in keep],
            "max_autotune": auto}


def batch_rows() -> dict:
    """The batched teaching engine on an H200: AR, EAGLE-3 and P-EAGLE at batch 8, 32 and 64 (bf16, greedy), with
    each row's time split, and the AR step with SDPA's cuDNN plans (before SDPA skipped cuDNN)."""
    name = "batch_rows_h200.json"
    r = _raw(name)
    keep = ("method", "k", "batch_size", "tokens_per_s", "acceptance_length", "identical_prompts", "num_prompts",
            "new_tokens", "seconds", "time_split_s")
    before = _raw("batch_profile_h200_cudnn.json")
    return {"source": f"benchmarks/results/{name}", "device": "NVIDIA H200", "settings": r["settings"],
            "rows": [{k: x.get(k) for k in keep} for x in r["results"]],
            "ar_before_cudnn_fix": [{k: x[k] for k in ("batch_size", "tokens_per_s", "ms_per_step", "new_tokens",
                                                       "steps")}
                                    for x in before["rows"] if x["method"] == "ar"]}


def vllm_cuda_h200() -> dict:
    """CUDA vLLM 0.26 on an H200: tokens/s, TPOT and vLLM's acceptance per (config, prompt set, concurrency)."""
    name = "vllm_cuda_h200_sweep.json"
    r = _raw(name)
    keep = ("config", "runner", "prompts", "method", "k", "concurrency", "tokens_per_s", "mean_tpot_ms",
            "acceptance_length", "acceptance_per_position", "num_prompts", "new_tokens", "identical_to_ar")
    return {"source": f"benchmarks/results/{name}", "device": r["gpu"], "vllm_version": r["vllm_version"],
            "torch": r["torch"], "date": r["date"], "command": r["command"], "settings": r["settings"],
            "rows": [{k: x.get(k) for k in keep} for x in r["results"]]}


def ablation() -> dict:
    """The P-EAGLE ablation at 135M: AL at K=7 (and at K=3/5 where replayed) per lever and arm."""
    r = _raw("ablation_135m.json")
    keep = ("lever", "arm", "method", "k", "acceptance_length", "acceptance_per_position", "second_draft_agreement",
            "acceptance_length_by_k")
    return {"source": "benchmarks/results/ablation_135m.json", "what": r["what"],
            "rows": [{k: row[k] for k in keep if k in row} for row in r["rows"]],
            "not_measured": [row["lever"] for row in r["not_measured"]]}


def costmodel_parts() -> dict:
    """The cost model's parts measured apart (peagle_lab.costmodel): per-position acceptance from a CPU
    replay, a gpt-oss-20b-size drafter's passes on an H200, the teaching engine's end-to-end CPU bench (its time
    split into drafting, verifying and bookkeeping), and the published figures of the vLLM blog and the paper."""
    replay = _raw("replay_acceptance_mtbench80.json")
    fwd = _raw("drafter_forward_cudagraph_h200.json")
    cpu = _raw("bench_cpu_mtbench.json")
    return {
        "source": "benchmarks/results/drafter_forward_cudagraph_h200.json",    # each part below names its own
        "replay_mtbench80": {"source": "benchmarks/results/replay_acceptance_mtbench80.json",
                             "num_prompts": replay["settings"]["num_prompts"],
                             "max_new_tokens": replay["settings"]["max_new_tokens"],
                             "acceptance_per_position": {
                                 m: replay["results"][key]["acceptance_per_position"]
                                 for m, key in (("eagle", "run5-eagle"), ("peagle", "run5-peagle3"))}},
        "drafter_20b": {"source": "benchmarks/results/drafter_forward_cudagraph_h200.json", "device": fwd["device"],
                        "command": fwd["command"], "drafter": fwd["drafter"],
                        "rows": [{k: r[k] for k in ("B", "K", "single_ms", "parallel_ms", "sequential_ms")}
                                 for r in fwd["rows"]]},
        "blog": {"source": "vLLM blog, P-EAGLE in vLLM (gpt-oss-20b, 1x B200): SPEED-Bench c=1 AR 456 tok/s; "
                           "AL on MT-Bench; P-EAGLE / EAGLE-3 at each's best K, concurrency 1-64",
                 "ar_tokens_per_s_c1": 456.0,
                 "al_mtbench": {"eagle": {"7": 3.27}, "peagle": {"3": 2.87, "7": 3.70}},
                 "concurrency": [1, 2, 4, 8, 16, 32, 64],
                 "ratio_mtbench": [1.55, 1.29, 1.35, 1.28, 1.27, 1.09, 1.05]},
        "paper": {"source": "P-EAGLE, arXiv 2602.01469: the abstract's speed-up over EAGLE-3 on GPT-OSS-120B, "
                            "GPT-OSS-20B and Qwen3-Coder-30B; its tables (1x H200, concurrency 2 and 4) per target",
                  "speedup_over_eagle3": [1.10, 1.36],
                  "tables_h200_c2_c4": {"gpt-oss-20b": [1.27, 1.36], "gpt-oss-120b": [1.04, 1.10],
                                        "qwen3-coder-30b": [1.04, 1.17]}},
        "teaching_cpu": {"source": "benchmarks/results/bench_cpu_mtbench.json", "command": cpu["command"],
                         "device": f"CPU, {cpu['info']['device']['cpu_count']} cores, torch threads "
                                   f"{cpu['info']['device']['torch_threads']}",
                         "settings": {k: cpu["settings"][k] for k in ("prompts", "num_prompts", "max_new_tokens",
                                                                     "temperature", "batch_size")},
                         "rows": [{k: r[k] for k in ("method", "k", "tokens_per_s", "acceptance_length",
                                                     "time_split_s")}
                                  for r in cpu["results"] if r["method"] in ("ar", "eagle", "peagle")]},
    }


def data_scaling() -> dict:
    """AL at K = 3, 5, 7 on 80 MT-Bench prompts (replayed) against the reply tokens a drafter was trained on, per
    series (one pass over fresh data, equal steps, shipped), and what regeneration costs."""
    raw, regen = _raw("data_scaling.json"), _raw("regen_throughput_h200.json")
    keep = ("series", "method", "name", "reply_tokens", "reply_tokens_seen", "passes", "steps", "lr_factor_at_export",
            "al")
    return {"source": "benchmarks/results/data_scaling.json", "prompts": raw["prompts"],
            "rows": [{k: r[k] for k in keep if k in r} for r in raw["rows"]],
            "regeneration_tokens_per_s": {"transformers": regen["ab"]["transformers"]["tokens_per_s"],
                                          "vllm": regen["ab"]["vllm"]["tokens_per_s"],
                                          "vllm_multi_turn": regen["main"]["steady_reply_tokens_per_s"],
                                          "vllm_four_engines": regen["four_engines"]["steady_reply_tokens_per_s"],
                                          "vllm_four_engines_alone":
                                              regen["four_engines_alone"]["steady_reply_tokens_per_s"]}}


def dspark() -> dict:
    """After P-EAGLE: DSpark (and its DFlash arm, the Markov head off) beside the shipped pair, replayed on the same
    80 MT-Bench replies at K = 3, 5, 7; CUDA vLLM 0.26 on an H100 (c=1 in three interleaved rounds, c=4, c=16); the
    float32 cross-check of vLLM's counters against the teaching engine; what the two arms trained on."""
    ev, vl = _raw("dspark_eval_mtbench80.json"), _raw("dspark_vllm_cuda_h100.json")
    keep = ("config", "method", "k", "runner", "dtype", "run", "concurrency", "tokens_per_s", "acceptance_length",
            "acceptance_per_position", "identical_to_ar", "mean_tpot_ms")
    xcheck = next(r for r in vl["results"] if r["run"] == "c1-xcheck")
    return {"source": "benchmarks/results/dspark_eval_mtbench80.json",
            "serving_source": "benchmarks/results/dspark_vllm_cuda_h100.json",
            "replay": {"num_prompts": ev["settings"]["num_prompts"], "max_new_tokens": ev["settings"]["max_new_tokens"],
                       "by_k": {k: {n: {f: r[f] for f in ("acceptance_length", "acceptance_per_position")}
                                    for n, r in by.items()} for k, by in ev["by_k"].items()}},
            "training": {"data": "greedy replies of the target to every turn of 16,384 ShareGPT conversations "
                                 "(6.8M reply tokens, regenerated with vLLM)",
                         "steps": 3255, "batch_size": 32, "minutes": 9, "layers": 2, "intermediate_size": 256,
                         "markov_rank": 32, "block_size": 8, "dflash_arm": "the same, markov_head=false (3,267 steps)",
                         "shipped_pair": "P-EAGLE 3 layers 5,499 steps, EAGLE-3 1 layer 4,440 steps, 3.7M tokens"},
            "vllm": {"gpu": vl["gpu"], "vllm_version": vl["vllm_version"], "settings": vl["settings"],
                     "rows": [{f: r.get(f) for f in keep} for r in vl["results"] if r["run"] != "c1-xcheck"]},
            "xcheck": {"k": 7, "max_new_tokens": 256, "prompts": ev["xcheck_prompts"],
                       "vllm_float32": {"acceptance_length": xcheck["acceptance_length"],
                                        "acceptance_per_position": xcheck["acceptance_per_position"],
                                        "num_drafts": xcheck["num_drafts"]},
                       "teaching_engine": ev["xcheck_k7_256"]["dspark"]}}


RECORDED = {f.__name__: f for f in (dspark, acceptance_by_category, drafter_size, objective_ab, train_memory_8b,
                                    kernel_timings,
                                    gpu_speed, ablation, batch_rows, vllm_cuda_h200, data_scaling)}
RECORDED["costmodel"] = costmodel_parts   # the file is named after what it feeds


def render(name: str) -> str:
    return json.dumps(RECORDED[name](), indent=1) + "\n"


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name in RECORDED:
        (OUT / f"{name}.json").write_text(render(name))
        print(f"wrote {OUT / name}.json")


if __name__ == "__main__":
    main()
