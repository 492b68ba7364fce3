"""Notebook parameters: `PEAGLE_*` environment variables over a notebook's defaults.

Every notebook has a cell tagged ``parameters`` that calls :func:`notebook_params` with the
full settings a reader gets. CI sets ``PEAGLE_SMOKE=1`` to run the small version, and any single
value can be overridden by name::

    >>> import os
    >>> os.environ["PEAGLE_NUM_PROMPTS"] = "2"
    >>> p = notebook_params(dict(num_prompts=20, k=5), smoke=dict(num_prompts=1))
    >>> p["num_prompts"], p["k"]
    (2, 5)
    >>> del os.environ["PEAGLE_NUM_PROMPTS"]

Precedence, lowest to highest: ``defaults`` -> ``smoke`` (only when ``PEAGLE_SMOKE=1``) ->
``PEAGLE_<NAME>`` environment variables. Values from the environment are parsed to the type of
the default (int, float, bool, str, or a list of those written ``3,5,7``).
"""
from __future__ import annotations

import os
from typing import Any

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def is_smoke() -> bool:
    """True when CI asked for the small version of every notebook (``PEAGLE_SMOKE=1``)."""
    return os.environ.get("PEAGLE_SMOKE", "0").strip().lower() in _TRUE


def _parse(name: str, raw: str, like: Any) -> Any:
    try:
        if isinstance(like, bool):
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(raw)
        if isinstance(like, int):
            return int(raw)
        if isinstance(like, float):
            return float(raw)
        if isinstance(like, (list, tuple)):
            item = like[0] if like else ""
            values = [_parse(name, part, item) for part in raw.split(",") if part.strip()]
            return type(like)(values)
        return raw
    except ValueError:
        raise ValueError(
            f"PEAGLE_{name.upper()}={raw!r} is not a valid {type(like).__name__}; "
            f"set it like the default {like!r} (lists as comma-separated values, e.g. 3,5,7)"
        ) from None


def notebook_params(defaults: dict[str, Any], smoke: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return ``defaults`` overridden by the smoke settings (if ``PEAGLE_SMOKE=1``) and env vars."""
    values = dict(defaults)
    if smoke and is_smoke():
        unknown = set(smoke) - set(defaults)
        if unknown:
            raise KeyError(f"smoke settings {sorted(unknown)} have no default; add them to defaults")
        values.update(smoke)
    for name, value in list(values.items()):
        raw = os.environ.get(f"PEAGLE_{name.upper()}")
        if raw is not None:
            values[name] = _parse(name, raw, value)
    return values
