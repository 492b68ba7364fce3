"""``python -m peagle_lab.tour NOTEBOOK_DIR OUT_DIR``: run every notebook in order, headless.

Each notebook is executed with the ``peagle-lab`` Jupyter kernel (falling back to the current
Python's), its outputs and widget state saved to ``OUT_DIR/NAME.ipynb`` and an HTML copy to
``OUT_DIR/NAME.html``. ``PEAGLE_SMOKE=1`` (``make tour``'s default) runs CI-sized versions.

>>> "PEAGLE_SMOKE=0 make tour" in size_note(smoke=True)
True
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from .params import is_smoke


def _kernel_name() -> str:
    from jupyter_client.kernelspec import KernelSpecManager

    return "peagle-lab" if "peagle-lab" in KernelSpecManager().find_kernel_specs() else "python3"


def size_note(smoke: bool) -> str:
    """What the sizes mean, said once before the first notebook runs."""
    if smoke:
        return ("peagle-lab tour at CI sizes (PEAGLE_SMOKE=1, the default): one or two prompts and a few dozen tokens "
                "each, so every number is tiny and noisy.\nFor the full-size notebooks run PEAGLE_SMOKE=0 make tour "
                "(about 25 minutes on a 2-core CPU).")
    return "peagle-lab tour at full size (PEAGLE_SMOKE=0): the numbers the notebooks' text discusses."


def run_tour(notebook_dir: str = "notebooks", out_dir: str = "build", timeout: int = 3600) -> list[dict]:
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kernel = _kernel_name()
    summary = []
    for path in sorted(Path(notebook_dir).glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        t0 = time.perf_counter()
        print(f"running {path.name} ...", file=sys.stderr, flush=True)
        status = "ok"
        try:
            NotebookClient(nb, timeout=timeout, kernel_name=kernel, store_widget_state=True,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        except Exception as err:  # keep going: the summary says which notebook failed and why
            status = f"FAILED: {type(err).__name__}: {str(err).splitlines()[-1][:200] if str(err) else ''}"
        seconds = time.perf_counter() - t0
        nbformat.write(nb, out / path.name)
        html, _ = HTMLExporter().from_notebook_node(nb)
        (out / path.with_suffix(".html").name).write_text(html, encoding="utf-8")
        summary.append({"notebook": path.name, "seconds": round(seconds, 1), "status": status})
    return summary


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    notebook_dir = argv[0] if argv else "notebooks"
    out_dir = argv[1] if len(argv) > 1 else "build"
    print(size_note(is_smoke()), flush=True)
    summary = run_tour(notebook_dir, out_dir)
    print(f"\npeagle-lab tour: {len(summary)} notebooks -> {out_dir}/ (.ipynb with outputs + .html)")
    for row in summary:
        print(f"  {row['notebook']:32s} {row['seconds']:7.1f} s  {row['status']}")
    return 0 if all(r["status"] == "ok" for r in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
