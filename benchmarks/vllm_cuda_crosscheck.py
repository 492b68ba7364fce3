"""vLLM's own acceptance counters (the CUDA sweep, bf16) beside the teaching engine's (replayed in float32) on the
same 80 MT-Bench prompts, 256 new tokens, T=0, K = 3, 5, 7: the CPU cross-check (vllm_cpu_crosscheck.json), on CUDA.

    python benchmarks/vllm_cuda_crosscheck.py
    # reads results/vllm_cuda_h200_sweep.json and results/replay_mtbench256_h200.json (the shipped pair), and
    # results/vllm_cuda_learned_mask_h200.json (a learned-mask P-EAGLE head, materialised for vLLM)

In float32 on a CPU the two are equal token for token; in bf16 the target's greedy reply parts from the float32 one
after a near-tie, so the text both sides score differs a little and so does acceptance.
"""
from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
NAMES = {"peagle": "peagle-shipped", "eagle": "eagle-shipped"}


def crosscheck(sweep: dict, replay: dict, concurrency: int = 1) -> dict:
    """Per method and K: vLLM's AL and per-position acceptance at ``concurrency`` next to the replay's, and the gaps."""
    rows = []
    for r in sweep["results"]:
        if r["prompts"] != "mt-bench" or r["method"] not in NAMES or r["concurrency"] != concurrency:
            continue
        if r["config"].endswith("-auto") and any(o["config"] == r["config"].replace("-auto", "-v1")
                                                 and o["concurrency"] == concurrency for o in sweep["results"]):
            continue                                  # one row per (method, K): the V1 runner's where both ran
        ours = replay["by_k"][str(r["k"])][NAMES[r["method"]]]
        gaps = [round(a - b, 4) for a, b in zip(r["acceptance_per_position"], ours["acceptance_per_position"])]
        rows.append({"method": r["method"], "k": r["k"], "config": r["config"],
                     "vllm": {"acceptance_length": round(r["acceptance_length"], 4),
                              "acceptance_per_position": [round(x, 4) for x in r["acceptance_per_position"]],
                              "num_drafts": r["num_drafts"], "new_tokens": r["new_tokens"]},
                     "teaching_engine": {"acceptance_length": ours["acceptance_length"],
                                         "acceptance_per_position": ours["acceptance_per_position"]},
                     "al_gap": round(r["acceptance_length"] - ours["acceptance_length"], 4),
                     "max_abs_gap_per_position": max(abs(g) for g in gaps)})
    rows.sort(key=lambda x: (x["method"], x["k"]))
    return {"what": "vLLM 0.26 on CUDA (bf16, CUDA graphs, concurrency %d) against the teaching engine "
                    "(float32 replay) "
                    "on the same 80 MT-Bench prompts, 256 new tokens, T=0" % concurrency,
            "date": replay["date"], "machine": f"{sweep['gpu']} ({sweep['vllm_version']}, {sweep['torch']})",
            "vllm_source": "benchmarks/results/vllm_cuda_h200_sweep.json",
            "replay_source": "benchmarks/results/replay_mtbench256_h200.json",
            "command": "python benchmarks/vllm_cuda_crosscheck.py",
            "rows": rows, "max_abs_al_gap": max(abs(x["al_gap"]) for x in rows)}


def learned_mask(record: dict) -> dict:
    """The learned-mask head's rows: vLLM's counters at each concurrency beside the replay of the same drafter."""
    name, rows = record["drafter"]["name"], []
    for r in record["serve"]["results"]:
        ours = record["replay"]["by_k"][str(r["k"])][name]
        gaps = [round(a - b, 4) for a, b in zip(r["acceptance_per_position"], ours["acceptance_per_position"])]
        rows.append({"method": r["method"], "k": r["k"], "concurrency": r["concurrency"],
                     "vllm": {"acceptance_length": round(r["acceptance_length"], 4),
                              "acceptance_per_position": [round(x, 4) for x in r["acceptance_per_position"]],
                              "num_drafts": r["num_drafts"], "new_tokens": r["new_tokens"]},
                     "teaching_engine": ours,
                     "al_gap": round(r["acceptance_length"] - ours["acceptance_length"], 4),
                     "max_abs_gap_per_position": max(abs(g) for g in gaps)})
    return {"what": "a learned-mask P-EAGLE head (mask row learned in training, materialised into a full embedding "
                    "table for vLLM) served by CUDA vLLM, against the teaching engine's float32 replay of the same "
                    f"drafter; {record['replay']['prompts']} prompts, {record['replay']['max_new_tokens']} new tokens",
            "source": "benchmarks/results/vllm_cuda_learned_mask_h200.json", "drafter": record["drafter"],
            "rows": rows}


def main() -> dict:
    sweep = json.loads((RESULTS / "vllm_cuda_h200_sweep.json").read_text())
    replay = json.loads((RESULTS / "replay_mtbench256_h200.json").read_text())
    out = crosscheck(sweep, replay)
    out["learned_mask"] = learned_mask(json.loads((RESULTS / "vllm_cuda_learned_mask_h200.json").read_text()))
    (RESULTS / "vllm_cuda_crosscheck_h200.json").write_text(json.dumps(out, indent=1) + "\n")
    for r in out["rows"]:
        print(f"{r['method']:<7} K={r['k']}  vLLM AL {r['vllm']['acceptance_length']:.3f}  "
              f"teaching engine {r['teaching_engine']['acceptance_length']:.3f}  gap {r['al_gap']:+.3f}  "
              f"max per-position gap {r['max_abs_gap_per_position']:.3f}")
    for r in out["learned_mask"]["rows"]:
        print(f"learned-mask peagle K={r['k']} c={r['concurrency']}  vLLM AL {r['vllm']['acceptance_length']:.3f}  "
              f"teaching engine {r['teaching_engine']['acceptance_length']:.3f}  gap {r['al_gap']:+.3f}")
    return out


if __name__ == "__main__":
    main()
