"""What guards a reader: the README is a front door, every link resolves, the commands shown parse, each page stays
short, and no lab word (the remote GPU workflow lives in lab/) reaches a user's page (text checks: no model loads)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKDOWN = [README, *sorted((ROOT / "docs").glob("*.md")),
            ROOT / "benchmarks" / "RESULTS.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)


def _without_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", s).replace(" ", "-")


def test_readme_is_at_most_15000_bytes():
    assert README.stat().st_size <= 15_000, f"README.md is {README.stat().st_size} bytes; move detail to docs/"


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_each_docs_page_is_at_most_12_kb(page):
    limit = 8_000 if page.name == "data-scaling.md" else 12_000       # a study report: question, method, result
    assert page.stat().st_size <= limit, f"docs/{page.name} is {page.stat().st_size} bytes (> {limit}): cut it"


def test_readme_names_the_two_commands_and_ci_runs_the_test_one():
    blocks = [b.strip() for b in _code_blocks(README.read_text())]
    assert "make tour" in blocks, "README must show `make tour` as its own command"
    assert "make test" in blocks, "README must show `make test` as its own command"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "make test" in [line.strip() for line in ci], ".ci/run must run the README's test command"


def test_readme_has_every_notebook_in_its_table():
    text = README.read_text()
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks
    for name in notebooks:
        assert f"](notebooks/{name})" in text, f"README's notebook table lacks a link to notebooks/{name}"


def test_readme_has_every_cli_command():
    from peagle_lab.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    text = README.read_text()
    for cmd in sub.choices:
        assert f"`peagle-lab {cmd}" in text, f"README's command table lacks `peagle-lab {cmd}`"


def test_readme_links_to_docs_and_results():
    text = README.read_text()
    assert "](docs/README.md)" in text and "](benchmarks/RESULTS.md)" in text


@pytest.mark.parametrize("pattern", [r"\brun \d", r"\bruns \d", r"16 MiB", r"\blent\b", r"\b20\d\d-\d\d-\d\d\b"])
def test_readme_is_not_a_lab_notebook(pattern):
    """Run numbers, the shipping cap, dates and machine-loan talk belong in docs/, not in the README."""
    found = re.findall(pattern, _without_code(README.read_text()))
    assert not found, f"README.md contains {found}: move it to a page under docs/"


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(page):
    text = _without_code(page.read_text())
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue                                     # http(s), mailto, in-page anchors
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve()
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"^#+ (.*)$", _without_code(dest.read_text()), flags=re.M)}
            if anchor not in slugs:
                broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_every_docs_page_is_in_the_index():
    index = (ROOT / "docs" / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not list {page.name}"


def test_results_md_is_what_make_results_generates():
    """benchmarks/RESULTS.md is generated: rerun `python benchmarks/make_results.py` after adding a result."""
    from helpers import load_benchmark

    make_results = load_benchmark("make_results.py")
    text = make_results.render()
    assert text == (ROOT / "benchmarks" / "RESULTS.md").read_text(), \
        "benchmarks/RESULTS.md is stale: run python benchmarks/make_results.py"
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        assert f"](results/{path.name})" in text, f"RESULTS.md does not show {path.name}"


def test_results_md_is_a_record_of_at_most_15_kb():
    size = (ROOT / "benchmarks" / "RESULTS.md").stat().st_size
    assert size <= 15_000, f"benchmarks/RESULTS.md is {size} bytes: one row per cited figure, history in git"


# Lab-diary language: who ran what when, on which loaned machine, in which attempt. A learner needs the present
# state and the command; dates, machines and commands live in benchmarks/RESULTS.md and the raw JSON.
DIARY = {                                       # case-insensitive except "window" (Windows is an OS)
    "run number": r"(?i)\bruns? ?\d",
    "call number": r"(?i)\bcalls? \d",
    "earlier pair": r"(?i)\bearlier pair\b",
    "device window": r"(?<!sliding )(?<!context )\bwindows?\b",
    "loaned machine": r"(?i)\bborrowed\b|\blent\b",
    "before/after the fix": r"(?i)\b(before|after) the fix\b",
    "session": r"(?i)\bsessions?\b",
    "attempt": r"(?i)\battempts?\b",
    "this round": r"(?i)\bthis round\b",
    "a date": r"\b20\d\d-\d\d-\d\d\b",
}
LEARNER_PAGES = sorted((ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("page", LEARNER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_have_no_diary_words(page):
    text = page.read_text()
    found = [(what, m.group(0)) for what, pattern in DIARY.items() for m in re.finditer(pattern, text)]
    assert not found, f"{page.relative_to(ROOT)}: {found}: say what holds now; history belongs to git"


def test_the_gpu_recipe_is_written_once():
    """README and docs/gpu-recipe.md show the same train-and-serve commands, and those commands use the presets
    and materialise the P-EAGLE drafter before vLLM serves it (vLLM reads the mask row from the drafter itself)."""
    def recipe(path: Path) -> str:
        blocks = [b for b in _code_blocks(path.read_text()) if b.startswith("T=")]
        assert len(blocks) == 1, f"{path.name}: expected one recipe block starting with T="
        return blocks[0]

    block = recipe(README)
    assert block == recipe(ROOT / "docs" / "gpu-recipe.md"), "edit both copies of the GPU recipe alike"
    assert "--preset peagle" in block and "--preset eagle" in block
    assert block.index("peagle-lab materialise") < block.index("vllm serve")


# The remote GPU workflow is the lab's, under lab/; a user's pages, the notebooks and the library never speak of it.
# Its vocabulary lives with it (lab/words.txt), so that this file does not speak of it either.
LAB_WORDS = "(?i)" + "|".join(line for line in (ROOT / "lab" / "words.txt").read_text().splitlines()
                              if line.strip() and not line.startswith("#"))
USER_TEXT = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "notebooks").glob("*.ipynb")),
             *sorted(p for p in (ROOT / "peagle_lab").rglob("*") if p.suffix in (".py", ".md", ".json"))]


def test_no_lab_words_outside_lab():
    found = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in USER_TEXT if p.is_file()
             for m in re.finditer(LAB_WORDS, p.read_text(errors="replace"))]
    assert not found, f"lab words outside lab/ (move the text to lab/README.md): {found}"


def _shown_commands(text: str) -> list[str]:
    """Each `peagle-lab ...` command in a bash block, continuation lines joined, comments dropped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" #")[0].strip()
            m = re.search(r"(?:^|\$\(|\.venv/bin/)peagle-lab (.*?)\)?$", line)
            if m and not line.startswith("#"):
                out.append(m.group(1))
    return out


@pytest.mark.parametrize("page", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_shown_commands_parse(page):
    """Every `peagle-lab` command a page shows is accepted by the CLI's parser (flags, choices, arity)."""
    import shlex

    from peagle_lab.cli import build_parser

    parser, bad = build_parser(), []
    for cmd in _shown_commands(page.read_text()):
        try:
            parser.parse_args(shlex.split(cmd.replace("...", "")))
        except SystemExit:
            bad.append(cmd)
    assert not bad, f"{page.name}: commands the CLI refuses: {bad}"
