"""Notebooks speak to a learner: their markdown has no lab-log words, and terms are introduced before use."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# What belongs in a lab log (docs/, benchmarks/RESULTS.md), not in a lesson.
FORBIDDEN = {
    "run number": r"\bruns? \d",
    "size cap": r"MiB cap|shipping cap",
    "a goal": r"\b\d(\.\d+)? goal\b",
    "lent machine": r"\blent\b|\bborrowed\b",
    "CI budget": r"CI budget|\bbudget\b.*\bCI\b|\bCI\b.*\bbudget\b",
    "CI talk": r"\bCI\b|PEAGLE_SMOKE",
    "a date": r"\b20\d\d-\d\d-\d\d\b|\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* 20\d\d\b",
    "this machine": r"\bthis (CPU|machine|VM)\b|\b\d-core\b|project's (CPU|GPU|machine)",
    "a diary": r"\bearlier pair\b|\brun \d\b|\bwindow\b|\bborrowed H200\b|\b(before|after) the fix\b|"
               r"before -> now|(?<!Restart )\bsession\b|\battempt\b",
}


def markdown(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]


def text(path: Path) -> list[str]:
    """Every cell: code cells print what a learner reads too."""
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_lab_log_words(path):
    """Markdown has none of the lab-log words; code cells print what a learner reads too, so they carry no diary
    words, dates of runs or loaned machines either."""
    found = [(what, m.group(0)) for md in markdown(path) for what, pattern in FORBIDDEN.items()
             for m in re.finditer(pattern, md)]
    found += [("a diary", m.group(0)) for t in text(path) for m in re.finditer(FORBIDDEN["a diary"], t, flags=re.I)]
    found += [(what, m.group(0)) for t in text(path) for what in ("a date", "lent machine")
              for m in re.finditer(FORBIDDEN[what], t)]
    assert not found, f"{path.name}: {found}"


@pytest.mark.parametrize("name", ["01", "02", "03", "04", "05"])
def test_each_of_01_to_05_has_a_checked_exercise_with_a_stub(name):
    cells = text(next(p for p in NOTEBOOKS if p.name.startswith(name)))
    ex = [t for t in cells if "ex.check_" in t]
    assert ex and any("raise NotImplementedError" in t and "solution_if_asked" in t for t in ex), name


@pytest.mark.parametrize("name", ["01", "02", "04", "05"])
def test_the_cost_model_is_set_beside_what_the_notebook_measures(name):
    """01, 02, 04 and 05 each print the cost model's prediction next to a measured figure."""
    cells = text(next(p for p in NOTEBOOKS if p.name.startswith(name)))
    code = [t for t in cells if "costmodel." in t and re.search(r"(?i)measured", t) and re.search(r"(?i)predict", t)]
    assert code, f"{name}: no cell sets the cost model's prediction beside a measurement"
    assert any(re.search(r"(?i)predicted, then measured", t) for t in cells), name


def test_02_cites_the_paper():
    assert any("2602.01469" in t for t in markdown(ROOT / "notebooks" / "02_parallel_drafting.ipynb")), \
        "02 must cite the P-EAGLE paper (arXiv 2602.01469)"
    nb02 = "\n".join(markdown(ROOT / "notebooks" / "02_parallel_drafting.ipynb"))
    for text in (nb02, (ROOT / "README.md").read_text()):
        assert "Mude Hui" in text and "arxiv.org/abs/2602.01469" in text, "cite the paper by its authors and link"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_says_what_a_learner_needs(path):
    """One line up front: a CPU (a laptop) is enough, and what a GPU adds."""
    first = markdown(path)[0]
    assert re.search(r"\bCPU\b|\blaptop\b", first) and "GPU" in first, f"{path.name}: say what the notebook needs"


def _first(cells: list[str], pattern: str) -> int:
    return next((i for i, text in enumerate(cells) if re.search(pattern, text)), len(cells))


def test_bonus_keeps_vllm_meaning():
    """The token the target contributes after verification is **the target's token** (defined in 01); "bonus" is
    kept for vLLM's meaning only, the extra token after all K drafts were accepted, and always says so."""
    cells = markdown(ROOT / "notebooks" / "01_sequential_eagle.ipynb")
    assert any("**the target's token**" in text for text in cells), "01 must define **the target's token**"
    for path in NOTEBOOKS:
        for text in markdown(path):
            if re.search(r"\bbonus\b", text, re.IGNORECASE):
                assert "vLLM" in text, f"{path.name}: 'bonus' only in vLLM's sense (after all K drafts), naming vLLM"


@pytest.mark.parametrize("term, definition", [
    (r"\bCOD\b", r"COD[^.]*\(|\*\*COD"),
    (r"training-time test", r"\*\*training-time test\*\*"),
    (r"trained depth", r"\*\*trained depth\*\*"),
    (r"mask token", r"\*\*mask token\*\*"),
])
def test_03_introduces_terms_before_use(term, definition):
    cells = markdown(ROOT / "notebooks" / "03_training.ipynb")
    used, defined = _first(cells, term), _first(cells, definition)
    assert defined < len(cells), f"03 never introduces {term!r}"
    assert defined <= used, f"03 uses {term!r} in markdown cell {used} before introducing it in cell {defined}"


# A term a learner meets is defined (in bold, in a markdown cell) in the first notebook that uses it, no later
# than the cell where it first appears (a code cell's printed label counts as a use).
TERMS = [
    ("AR", r"\bAR\b", r"\*\*AR\*\*"),
    ("MT-Bench", r"(?i)mt-bench", r"\*\*MT-Bench\*\*"),
    ("draft vocabulary", r"(?i)draft[ _-]vocab", r"\*\*draft vocabulary\*\*"),
    ("trained depth", r"(?i)trained[ _]depth", r"\*\*trained depth\*\*"),
    ("anchor", r"(?i)\banchors?\b", r"\*\*anchor\*\*"),
    ("CUDA graph", r"(?i)CUDA graph", r"\*\*CUDA graphs?\*\*"),
    ("TPOT", r"(?i)\btpot\b|_tpot_", r"\*\*TPOT\*\*"),
]


@pytest.mark.parametrize("name, term, definition", TERMS, ids=[t[0] for t in TERMS])
def test_terms_are_defined_where_first_used(name, term, definition):
    first = next((p for p in NOTEBOOKS if any(re.search(term, t) for t in text(p))), None)
    assert first is not None, f"no notebook uses {name!r}: drop it from TERMS"
    cells = json.loads(first.read_text())["cells"]
    used = _first(text(first), term)
    defined = next((i for i, c in enumerate(cells)
                    if c["cell_type"] == "markdown" and re.search(definition, "".join(c["source"]))), len(cells))
    assert defined <= used, (f"{first.name} uses {name!r} in cell {used} but defines it (in bold) "
                             + (f"only in cell {defined}" if defined < len(cells) else "nowhere"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_links_the_glossary(path):
    first = markdown(path)[0]
    assert "](../docs/glossary.md)" in first, f"{path.name}: link the glossary from the first cell"
    assert (ROOT / "docs" / "glossary.md").exists()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_expected_answers_stay_folded_until_the_reader_opens_them(path):
    """An exercise's expected answer sits in a collapsed <details> block, never in plain sight under it."""
    shown = [t[:80] for t in markdown(path) if re.search(r"Expected answers?|\(Expected:", t) and "<details>" not in t]
    assert not shown, f"{path.name}: expected answers in plain sight: {shown}"


def test_05_draws_the_c1_spread_from_its_records_and_cites_only_recorded_ratios():
    """05's concurrency-1 spread comes from the recorded rounds (no typed table of tokens/s), and every ratio its
    reading cites is one the recorded rows give: the H200 sweep's single measurements and the H100's medians."""
    import statistics

    from peagle_lab import recorded

    cells = text(ROOT / "notebooks" / "05_serving.ipynb")
    md = markdown(ROOT / "notebooks" / "05_serving.ipynb")
    assert any("spread_figure(" in t and "repeat_spread(" in t and 'recorded.load("dspark")' in t for t in cells)
    assert not [line for t in md for line in t.splitlines() if line.startswith("|") and "tokens/s" in line]
    assert not [t for t in cells if "0.88" in t], "a ratio that no recorded file of this repository holds"
    h100 = [r for r in recorded.load("dspark")["vllm"]["rows"] if r["concurrency"] == 1]
    configs = {r["config"] for r in h100}
    med = {c: statistics.median(r["tokens_per_s"] for r in h100 if r["config"] == c) for c in configs}
    h200 = {r["config"]: r for r in recorded.load("vllm_cuda_h200")["rows"]
            if r["prompts"] == "mt-bench" and r["concurrency"] == 1}
    tps = {c: r["tokens_per_s"] for c, r in h200.items()}
    reading = next(t for t in md if t.startswith("Read the figure and the two tables together"))
    for cited in (tps["peagle-k3-v1"] / tps["ar-v1"], med["peagle-k3-v1"] / med["ar-v1"],
                  tps["eagle-k3-auto"] / tps["ar-auto"], med["eagle-k3-v2"] / med["ar-v2"],
                  med["peagle-k3-v1"] / med["eagle-k3-v2"], tps["peagle-k3-v1"] / tps["eagle-k3-auto"],
                  tps["peagle-k3-v1"] / tps["eagle-k3-v1"]):
        assert f"{cited:.2f}x" in reading, f"{cited:.2f}x"
    pe = [h200[f"peagle-k{k}-v1"] for k in (3, 5, 7)]
    assert ", ".join(f"{r['tokens_per_s']:.0f}" for r in pe) in reading
    assert ", ".join(f"{r['acceptance_length']:.2f}" for r in pe) in reading
