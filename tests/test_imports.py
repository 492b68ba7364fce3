"""The library's imports run one way: no module reaches, directly or through others, back to itself.

Every ``import peagle_lab...`` and ``from . import ...`` counts, at module level and inside functions
(an import inside a function hides a loop from Python at load time, not from a reader).
"""
import ast
from pathlib import Path

import peagle_lab

ROOT = Path(peagle_lab.__file__).parent


def _module_name(path: Path) -> str:
    parts = ("peagle_lab",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """``{module: modules of peagle_lab it imports}``; ``from X import name`` counts as X.name when that is a module."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                found = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            else:
                continue
            edges |= {m for m in found if m in modules and m != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop as ``[a, b, ..., a]``, or None (depth-first search, three colours)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (loop := visit(nxt)):
                return loop
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (loop := visit(node)):
            return loop
    return None


def test_the_finder_sees_a_loop_hidden_in_a_function():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_graph_reads_relative_and_function_level_imports():
    graph = import_graph()
    assert "peagle_lab.train.replay" in graph["peagle_lab.cli"]               # imported inside cmd_eval
    assert "peagle_lab.train.loss" in graph["peagle_lab.train.replay"]        # from .loss import ...
    assert "peagle_lab.kernels" in graph["peagle_lab.kernels.batched"]    # from . import copy_and_expand...


def test_the_library_has_no_import_loop():
    assert find_cycle(import_graph()) is None
