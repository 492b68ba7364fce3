"""Recorded results ship as package data, are what benchmarks/make_recorded.py makes, and notebooks read only them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import load_benchmark
from peagle_lab import recorded

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _make_recorded():
    return load_benchmark("make_recorded.py")


def _code(path: Path) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")


def test_names_are_the_generated_files():
    assert recorded.names() == sorted(_make_recorded().RECORDED)


@pytest.mark.parametrize("name", recorded.names())
def test_every_recorded_file_loads_and_is_generated(name):
    rec = recorded.load(name)
    assert (ROOT / rec["source"]).is_file(), f"{name}: its source {rec['source']} is missing"
    assert (ROOT / "peagle_lab" / "recorded" / f"{name}.json").read_text() == _make_recorded().render(name), \
        f"peagle_lab/recorded/{name}.json is stale: run python benchmarks/make_recorded.py"
    assert (ROOT / "peagle_lab" / "recorded" / f"{name}.json").stat().st_size < 64_000, "keep recorded files small"


def test_gpu_speed_compares_like_with_like():
    """The fastest-configuration rows notebook 02 divides by one another all ran the same prompts (a phase cut short by
    its time budget would skew a ratio), and every max-autotune row has its own call's plain AR beside it."""
    best = recorded.load("gpu_speed")["best"]
    counts = {r["num_prompts"] for r in best["rows"] + best["max_autotune"]}
    assert counts == {best["settings"]["num_prompts"]}, counts
    assert {r["side"] for r in best["rows"]} == {"plain", "fast"}
    for r in (r for r in best["max_autotune"] if r["side"] != "plain"):
        assert any(p["source"] == r["source"] and p["side"] == "plain" and p["method"] == "ar"
                   for p in best["max_autotune"])


def test_unknown_name_lists_the_shipped_ones():
    with pytest.raises(KeyError, match="kernel_timings"):
        recorded.load("no_such_result")


def test_recorded_files_are_package_data():
    assert '"recorded/*.json"' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_plot_only_shipped_recorded_results(path):
    code = _code(path)
    assert "../benchmarks" not in code and "benchmarks/results" not in code, \
        f"{path.name} reads benchmarks/ (absent outside a checkout): use peagle_lab.recorded.load(name)"
    for name in re.findall(r"""recorded\.load\(\s*["']([^"']+)["']""", code):
        assert name in recorded.names(), f"{path.name} loads recorded result {name!r}, which is not shipped"


def test_the_shipped_drafters_fit_the_size_budget():
    """The shipped drafters are package data in every install and clone, so the three (EAGLE-3, P-EAGLE, DSpark)
    stay within 48 MB together and each under 16 MiB; a wider drafter is measured and recorded without being
    shipped."""
    drafters = ROOT / "peagle_lab" / "drafters"
    sizes = {d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in drafters.iterdir()
             if d.is_dir() and not d.name.startswith("__")}
    assert {"eagle-smollm2", "peagle-smollm2", "dspark-smollm2"} <= set(sizes)
    assert sum(sizes.values()) <= 48_000_000, f"shipped drafters {sizes}: {sum(sizes.values()):,} bytes > 48 MB"
    assert max(sizes.values()) < 16 * 2**20, f"a shipped drafter is over 16 MiB: {sizes}"
