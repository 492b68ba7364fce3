"""The README's picture plots what the CUDA vLLM sweep recorded: benchmarks/readme_figure.py's bars are the raw sweep's
rows for the shipped pair at K=7 and concurrency 1 on MT-Bench, and the README's caption states that setting and
those ALs (a data oracle; the image itself is not compared)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "benchmarks" / "results" / "vllm_cuda_h200_sweep.json"


def _script():
    return load_benchmark("readme_figure.py")


def _raw_row(config: str) -> dict:
    rows = [r for r in json.loads(RAW.read_text())["results"]
            if r["config"] == config and r["concurrency"] == 1 and r["prompts"] == "mt-bench"]
    assert len(rows) == 1, (config, len(rows))
    return rows[0]


def test_the_bars_are_the_recorded_sweep_rows():
    series = {s["label"]: s for s in _script().data()}
    assert list(series) == ["EAGLE-3", "P-EAGLE"]
    for label, config, layers in (("EAGLE-3", "eagle-k7-v1", 1), ("P-EAGLE", "peagle-k7-v1", 3)):
        s, raw = series[label], _raw_row(config)
        assert s["config"] == config and s["layers"] == layers
        assert s["acceptance_per_position"] == raw["acceptance_per_position"]
        assert len(s["acceptance_per_position"]) == 7
        assert s["acceptance_length"] == raw["acceptance_length"] and s["num_prompts"] == raw["num_prompts"] == 80
        # vLLM's AL is one target token plus the accepted share at each draft position
        assert s["acceptance_length"] == pytest.approx(1 + sum(s["acceptance_per_position"]), abs=1e-9)


def test_the_readme_caption_states_what_the_picture_shows():
    raw = json.loads(RAW.read_text())
    assert raw["gpu"] == "NVIDIA H200" and raw["settings"]["max_new_tokens"] == 256
    als = {s["label"]: f"{s['acceptance_length']:.2f}" for s in _script().data()}
    readme = (ROOT / "README.md").read_text()
    caption = readme[readme.index("](docs/acceptance_per_position.png)"):].split("\n\n")[1]
    for needed in ("K=7", "H200", "256 tokens", "benchmarks/readme_figure.py", "Notebook 02"):
        assert needed in caption, f"the README's caption should say {needed!r}"
    for label, al in als.items():
        assert f"{label} (AL {al})" in readme, f"the README's picture text should quote {label}'s AL {al}"
