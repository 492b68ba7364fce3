"""Short steps: no function in the library runs over 80 lines (nano-vllm's ``step()`` is ~8).

A long function is several functions; one that could not be split yet is named in ALLOWED with the
reason, so the list shows what is left to do.
"""
import ast
from pathlib import Path

import peagle_lab

ROOT = Path(peagle_lab.__file__).parent
MAX_LINES = 80

# "module.py:function" -> why it is still long
ALLOWED: dict[str, str] = {}


def long_functions(limit: int = MAX_LINES) -> dict[str, int]:
    """``{"path.py:name": lines}`` for every function (nested ones count inside their parent) over ``limit``."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = lines
    return out


def test_no_function_over_80_lines():
    over = {name: n for name, n in long_functions().items() if name not in ALLOWED}
    assert not over, f"functions over {MAX_LINES} lines (split them, or allow one in ALLOWED with the reason): {over}"


def test_allow_list_names_only_long_functions():
    stale = sorted(set(ALLOWED) - set(long_functions()))
    assert not stale, f"no longer over {MAX_LINES} lines: remove from ALLOWED: {stale}"
