"""What a person sees: the acceptance widget in JupyterLab, in a real Chromium.

Starts JupyterLab headless on 127.0.0.1 (free port, random token) over a small notebook that runs
the real engine (embedded target, shipped drafters, K = 3 and 5) and shows ``viz.acceptance_explorer``
and ``viz.step_explorer``; opens it in Debian's Chromium through Playwright, runs all cells from the
Run menu and reads back from the page what it draws:

* K bars per method, whose data (``gd.data``) and drawn pixel heights equal the library's
  per-position acceptance (the notebook saves the rows it plotted to ``rows.json``);
* after picking another K in the widget's dropdown, a re-render with the new number of bars;
* the step-by-step view (``viz.step_explorer``) showing the engine's recorded steps, before and
  after its "next" button.

Screenshots go to ``build/`` (docs/acceptance_widget.png is ``build/acceptance_widget.png``).
Outside CI the test skips when Chromium or Playwright is absent; with ``CI=true`` it fails
instead, because ``.ci/run`` installs both.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("PEAGLE_CHROMIUM", "/usr/bin/chromium")
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
# Root in a container: no sandbox (it needs user namespaces), nothing fetched in the background.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-default-apps", "--disable-sync",
                 "--disable-extensions", "--no-first-run", "--no-default-browser-check",
                 "--metrics-recording-only", "--mute-audio"]
KS = (3, 5)

NOTEBOOK_CELLS = [
    f"""import json, torch
torch.manual_seed(0)
torch.set_num_threads(1)  # Chromium and JupyterLab share the CPU: two torch threads would fight them
from peagle_lab.target import Target
from peagle_lab.drafters_registry import drafter_for
from peagle_lab.engines.teaching import generate
from peagle_lab.prompts import load_prompts

target = Target.load()
ids = target.chat_ids(load_prompts("mt-bench", 1)[0])
rows = []
for method in ("eagle", "peagle"):
    drafter, _ = drafter_for(target, method)
    for k in {KS!r}:
        last = generate(target, ids, method=method, drafter=drafter, k=k, max_new_tokens=24)
        st = last.acceptance
        rows.append(dict(method=method, k=k, prompts="mt-bench", temperature=0.0,
                         acceptance_length=st.acceptance_length, acceptance_per_position=st.per_position))
json.dump(rows, open("rows.json", "w"))
json.dump([vars(s) for s in last.steps], open("steps.json", "w"))""",
    """from peagle_lab.viz import acceptance_explorer
acceptance_explorer(rows)""",
    """from peagle_lab.viz import step_explorer
step_explorer(last, target.decode)""",
]

# Every plotly graph on the page: its data, and the pixel height of every drawn bar per trace.
READ_PLOTS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
    traces: (gd.data || []).map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)})),
    yrange: gd._fullLayout.yaxis.range, ylen: gd._fullLayout.yaxis._length,
    drawn: Array.from(gd.querySelectorAll('.barlayer .trace')).map(
        tr => Array.from(tr.querySelectorAll('.point path')).map(p => p.getBBox().height)),
    legend: Array.from(gd.querySelectorAll('.legendtext')).map(e => e.textContent),
}))"""


def _missing(reason: str):
    if os.environ.get("PEAGLE_CHROMIUM_INSTALL_FAILED"):
        pytest.skip(f"{reason}: {os.environ['PEAGLE_CHROMIUM_INSTALL_FAILED']}")
    if IN_CI:
        pytest.fail(f"{reason}; with CI=true this is a set-up fault (.ci/run installs Debian's chromium, "
                    "requirements.txt playwright)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def sync_playwright():
    """Playwright's sync API, once Chromium and the playwright package are known to be there."""
    if not Path(CHROMIUM).exists():
        _missing(f"Chromium not found at {CHROMIUM} (Debian: apt-get install chromium; or set PEAGLE_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright Python package is not installed (pip install -r requirements.txt)")
    return sync_playwright


@pytest.fixture()
def lab(sync_playwright, tmp_path):
    """JupyterLab on 127.0.0.1 serving a folder with the widget notebook; yields (url, folder)."""
    import nbformat

    work = tmp_path / "nb"
    work.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in NOTEBOOK_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, work / "acceptance_widget.ipynb")
    # No news or update checks (no pop-up over the screenshot, no network), no saved layout.
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    notifications = json.dumps({"fetchNews": "false", "checkForUpdates": False})
    (settings / "notification.jupyterlab-settings").write_text(notifications)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), IPYTHONDIR=str(tmp_path / "ipython"))
    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp_path / "jupyterlab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
         f"--port={port}", "--port-retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={work}"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("JupyterLab did not start:\n" + (tmp_path / "jupyterlab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/lab/tree/acceptance_widget.ipynb?token={token}", work
    finally:
        # The server and the kernel it started are ours: stop that process group.
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
        log.close()


def _check_bars(plot: dict, rows: list[dict], k: int) -> None:
    """K bars per method; data and drawn heights equal the library's per-position acceptance."""
    expected = {r["method"]: r["acceptance_per_position"] for r in rows if r["k"] == k}
    assert len(plot["traces"]) == len(expected) == len(plot["drawn"]), plot
    lo, hi = plot["yrange"]
    px = (hi - lo) / plot["ylen"]  # data units per pixel
    for trace, drawn in zip(plot["traces"], plot["drawn"]):
        method = trace["name"].split(" ")[0]
        assert trace["name"].startswith(f"{method} K={k}"), trace["name"]
        assert trace["x"] == list(range(1, k + 1)) and len(drawn) == k, (trace, drawn)
        assert trace["y"] == pytest.approx(expected[method], abs=1e-12)
        # What the eye sees: bar heights in pixels, back in acceptance units (plotly snaps edges
        # to whole pixels, so allow 1.5 px).
        assert [h * px for h in drawn] == pytest.approx(expected[method], abs=1.5 * px), (method, drawn)
    assert sorted(text.split(" ")[0] for text in plot["legend"]) == sorted(expected)


def _check_step(page, step: dict, index: int) -> None:
    """The step view shows the recorded step: K drafts with their verdicts, then the target's token."""
    n, k = step["accepted"], len(step["drafts"])
    roles = ["accepted"] * n + ["rejected"] * (n < k) + ["discarded"] * max(0, k - n - 1)
    roles.append("extra" if n == k else "replacement")
    view = page.locator(f'.peagle-step[data-step="{index}"]')
    view.wait_for()
    cells = view.locator("td").evaluate_all("tds => tds.map(td => [td.dataset.role, +td.dataset.token])")
    assert cells == [list(c) for c in zip(roles, step["drafts"] + [step["next_token"]])], (index, cells, step)
    assert f"step {index + 1} of" in view.inner_text()


def test_acceptance_widget_in_chromium(sync_playwright, lab):
    url, work = lab
    shots = REPO / "build"
    shots.mkdir(exist_ok=True)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        t0, phases = time.monotonic(), {}
        try:
            page.set_default_timeout(int(os.environ.get("PEAGLE_BROWSER_TIMEOUT_MS", "90000")))
            page.goto(url)
            page.locator(".jp-Notebook .jp-Cell").first.wait_for()
            # Wait for the notebook's kernel: "Run All" before it is connected asks for a kernel.
            page.wait_for_function("() => /Python 3 \\(ipykernel\\)[\\s|]*Idle/.test("
                                   "(document.querySelector('#jp-main-statusbar') || {}).innerText)")
            phases["lab loaded"] = time.monotonic() - t0
            # Run > Run All Cells, as a reader would.
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

            # The engine runs in the kernel (target load + 4 short generations), then the widget draws.
            page.wait_for_function("() => { const gd = document.querySelector('.js-plotly-plot');"
                                   " return gd && gd.data && gd.querySelectorAll('.barlayer .point').length > 0; }",
                                   timeout=180_000)
            phases["notebook ran"] = time.monotonic() - t0
            rows = json.loads((work / "rows.json").read_text())
            (plot,) = page.evaluate(READ_PLOTS)
            _check_bars(plot, rows, KS[0])  # the explorer opens on the smallest K
            widget = page.locator(".jp-Cell", has=page.locator(".widget-dropdown")).locator(".jp-Cell-outputWrapper")
            widget.screenshot(path=str(shots / f"acceptance_widget_k{KS[0]}.png"))

            # Pick another K in the widget: the plot is redrawn with K bars per method.
            page.locator(".widget-dropdown", has=page.locator("label", has_text=re.compile(r"^K$"))).locator("select") \
                .select_option(str(KS[1]))
            page.wait_for_function(f"() => {{ const gd = document.querySelector('.js-plotly-plot');"
                                   f" return gd && gd.data && gd.data.length && gd.data[0].x.length === {KS[1]}"
                                   f" && gd.querySelectorAll('.barlayer .point').length"
                                   f" === {KS[1]} * gd.data.length; }}")
            (plot,) = page.evaluate(READ_PLOTS)
            _check_bars(plot, rows, KS[1])
            widget.screenshot(path=str(shots / "acceptance_widget.png"))

            # The step-by-step view under it: the recorded steps, moved through with the buttons.
            steps = json.loads((work / "steps.json").read_text())
            _check_step(page, steps[0], 0)
            if len(steps) > 1:
                page.get_by_role("button", name="next").click()
                _check_step(page, steps[1], 1)
            page.locator(".jp-Cell", has=page.locator(".peagle-step")).locator(".jp-Cell-outputWrapper") \
                .screenshot(path=str(shots / "step_explorer.png"))
            phases["step view checked"] = time.monotonic() - t0
            print("browser phases (s since page open):", {k: round(v, 1) for k, v in phases.items()})
            phases["K changed, checked"] = time.monotonic() - t0
        except Exception:
            page.screenshot(path=str(shots / "acceptance_widget_failure.png"))  # what the browser showed
            (shots / "acceptance_widget_failure.html").write_text(page.content())
            raise
        finally:
            browser.close()
