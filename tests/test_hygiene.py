"""Repo hygiene: short lines, short functions, and imports that run one way.

* Lines: no line of Python in peagle_lab/, tests/ or benchmarks/ runs over 120 characters (wrap the
  arguments, split a string by implicit concatenation, or name an intermediate value).
* Functions: no function in the library runs over 80 lines (nano-vllm's ``step()`` is ~8). A long
  function is several functions; one that could not be split yet is named in ALLOWED with the reason,
  so the list shows what is left to do.
* Imports: the graph is read from the source with ``ast``: every ``import`` and ``from ... import`` of
  a peagle_lab module, at module level and inside functions alike (a function-level import is still a
  dependency; it only hides a cycle from the interpreter). Two views must both be acyclic:

  - modules: ``peagle_lab.engines.teaching -> peagle_lab.target`` and so on;
  - packages: each root module is its own node and each subpackage (``engines``, ``train``,
    ``serving``, ``kernels``, ...) one node, so a root module and a subpackage that import each other
    (through any of their modules) are a cycle even when no two modules are.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "peagle_lab"
MAX_LINE = 120
MAX_FUNCTION_LINES = 80

# "module.py:function" -> why it is still long
ALLOWED: dict[str, str] = {}


# --------------------------------------------------------------------------- line length
def long_lines(limit: int = MAX_LINE) -> list[str]:
    """``"path:line (n chars)"`` for every line over ``limit`` in the library, the tests and the benchmarks."""
    out = []
    for folder in ("peagle_lab", "tests", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if len(line) > limit:
                    out.append(f"{path.relative_to(REPO).as_posix()}:{number} ({len(line)} chars)")
    return out


def test_no_line_over_120_characters():
    over = long_lines()
    assert not over, (f"{len(over)} lines over {MAX_LINE} characters (wrap arguments, split strings, name "
                      f"intermediate values): {over}")


# --------------------------------------------------------------------------- function length
def long_functions(limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``{"path.py:name": lines}`` for every function (nested ones count inside their parent) over ``limit``."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out[f"{path.relative_to(PKG).as_posix()}:{node.name}"] = lines
    return out


def test_no_function_over_80_lines():
    over = {name: n for name, n in long_functions().items() if name not in ALLOWED}
    assert not over, (f"functions over {MAX_FUNCTION_LINES} lines (split them, or allow one in ALLOWED with "
                      f"the reason): {over}")


def test_allow_list_names_only_long_functions():
    stale = sorted(set(ALLOWED) - set(long_functions()))
    assert not stale, f"no longer over {MAX_FUNCTION_LINES} lines: remove from ALLOWED: {stale}"


# --------------------------------------------------------------------------- one-way imports
def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` refers to (a package's ``__init__`` or a module), else the nearest enclosing one."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """``{module: modules it imports}`` over peagle_lab (implicit parent-package imports left out)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:                                                  # from . / from .. import
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]   # `from pkg import module` too
            for t in targets:
                if t.split(".")[0] != "peagle_lab":
                    continue
                dep = _resolve(t, modules)
                if dep and dep != mod:
                    graph[mod].add(dep)
    return graph


def package_of(module: str) -> str:
    """Root modules stand alone; a subpackage's modules collapse into ``peagle_lab.<subpackage>``."""
    parts = module.split(".")
    path = PKG.joinpath(*parts[1:2])
    return ".".join(parts[:2]) if len(parts) > 1 and path.is_dir() else module


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_graph_sees_relative_and_function_level_imports():
    graph = import_graph()
    assert "peagle_lab.engines.teaching" in graph["peagle_lab.cli.generate"]  # imported inside a function
    assert "peagle_lab.train.replay" in graph["peagle_lab.cli.evaluate"]      # imported inside run
    assert "peagle_lab.target" in graph["peagle_lab.engines.teaching"]       # a relative import two levels up
    assert "peagle_lab.train.loss" in graph["peagle_lab.train.replay"]       # from .loss import ...
    assert "peagle_lab.kernels" in graph["peagle_lab.kernels.batched"]       # from . import copy_and_expand...


def test_no_cycle_between_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_cycle_between_packages():
    packages: dict[str, set[str]] = {}
    for mod, deps in import_graph().items():
        node = package_of(mod)
        packages.setdefault(node, set()).update(package_of(d) for d in deps if package_of(d) != node)
    cycle = find_cycle(packages)
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle)


def test_every_heavy_entry_names_a_test():
    """conftest.HEAVY (what `make test-fast` leaves out) names functions that exist, so a rename cannot quietly
    put a slow test back into the development loop or drop a mark."""
    import re

    from conftest import HEAVY

    for file, names in HEAVY.items():
        text = (REPO / "tests" / file).read_text()
        for name in names:
            assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", text, re.M), f"{file}: no test {name}"
