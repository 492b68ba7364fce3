"""The recorded CUDA cross-check is what benchmarks/vllm_cuda_crosscheck.py makes from the two raw records, and vLLM's
acceptance in bf16 stays within a few hundredths of the teaching engine's at every K."""
import json
from pathlib import Path

from helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _module():
    return load_benchmark("vllm_cuda_crosscheck.py")


def test_recorded_crosscheck_is_regenerated_from_the_raw_records():
    sweep = json.loads((RESULTS / "vllm_cuda_h200_sweep.json").read_text())
    replay = json.loads((RESULTS / "replay_mtbench256_h200.json").read_text())
    made = _module().crosscheck(sweep, replay)
    recorded = json.loads((RESULTS / "vllm_cuda_crosscheck_h200.json").read_text())
    assert made == {k: v for k, v in recorded.items() if k != "learned_mask"}, \
        "stale: run python benchmarks/vllm_cuda_crosscheck.py"
    assert {(r["method"], r["k"]) for r in made["rows"]} == {(m, k) for m in ("eagle", "peagle") for k in (3, 5, 7)}
    assert replay["max_new_tokens"] == sweep["settings"]["max_new_tokens"] == 256     # equal settings
    for r in made["rows"]:
        assert r["vllm"]["new_tokens"] == made["rows"][0]["vllm"]["new_tokens"]       # one reply budget per prompt
        assert abs(r["al_gap"]) < 0.05 and r["max_abs_gap_per_position"] < 0.02, r


def test_learned_mask_head_served_by_cuda_vllm_accepts_as_the_teaching_engine_replays_it():
    """A head whose mask embedding was learned (no token id of the vocabulary) is materialised for vLLM; served,
    vLLM's counters must agree with the teaching engine's replay of that same drafter on the same prompts."""
    record = json.loads((RESULTS / "vllm_cuda_learned_mask_h200.json").read_text())
    made = _module().learned_mask(record)
    assert made == json.loads((RESULTS / "vllm_cuda_crosscheck_h200.json").read_text())["learned_mask"], \
        "stale: run python benchmarks/vllm_cuda_crosscheck.py"
    assert record["drafter"]["learn_mask_embedding"] is True
    assert record["serve"]["settings"]["max_new_tokens"] == record["replay"]["max_new_tokens"]     # equal settings
    assert {r["concurrency"] for r in made["rows"]} == {1, 16}
    for r in made["rows"]:
        assert r["vllm"]["num_drafts"] > 1000
        assert abs(r["al_gap"]) < 0.05 and r["max_abs_gap_per_position"] < 0.02, r
