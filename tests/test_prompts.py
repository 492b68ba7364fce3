import json

import pytest

from peagle_lab.prompts import PromptFileError, iter_json_array_records, load_prompts, sharegpt_from_text


def test_embedded_prompt_set_sizes():
    assert len(load_prompts("mt-bench")) == 80
    assert len(load_prompts("humaneval")) == 164
    assert len(load_prompts("sharegpt")) >= 17_000
    assert load_prompts("mt-bench", 2)[0].startswith("Compose an engaging travel blog post")
    assert load_prompts("humaneval", 1)[0].startswith("from typing import List")


def test_truncated_sharegpt_json_keeps_complete_records():
    records = [{"id": "a", "conversations": [{"from": "human", "value": "first?"}, {"from": "gpt", "value": "x"}]},
               {"id": "b", "conversations": [{"from": "gpt", "value": "hello"}, {"from": "human", "value": "second?"}]},
               {"id": "c", "conversations": [{"from": "human", "value": "  "}]}]
    text = json.dumps(records, indent=2)
    truncated = text + ',\n  {"id": "d", "conversations": [{"from": "human", "value": "cut off he'
    assert sharegpt_from_text(truncated) == ["first?", "second?"]
    assert len(list(iter_json_array_records(truncated))) == 3
    assert sharegpt_from_text(text) == ["first?", "second?"]


def test_user_jsonl(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "one"}\n\n{"turns": ["two", "later"]}\n')
    assert load_prompts(f) == ["one", "two"]
    assert load_prompts(f, limit=1) == ["one"]


def test_bad_jsonl_line_is_named(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "ok"}\n{"prompt": oops}\n')
    with pytest.raises(PromptFileError, match=r"bad.jsonl:2: not valid JSON"):
        load_prompts(f)
    f.write_text('{"prompt": "ok"}\n{"text": "no prompt key"}\n')
    with pytest.raises(PromptFileError, match=r"bad.jsonl:2: expected"):
        load_prompts(f)


def test_missing_prompt_file_names_the_choices(tmp_path):
    with pytest.raises(FileNotFoundError, match="mt-bench, humaneval, sharegpt or a .jsonl"):
        load_prompts(tmp_path / "nope.jsonl")


def test_spread_takes_every_mt_bench_category(tmp_path):
    allp = load_prompts("mt-bench")
    spread = load_prompts("mt-bench", 8, spread=True)
    assert spread == allp[::10]                                   # one per category (ten each, in order)
    assert load_prompts("mt-bench", 8) == allp[:8]                # the default stays "first N"
    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps({"prompt": str(i)}) + "\n" for i in range(7)))
    assert load_prompts(f, 3, spread=True) == ["0", "2", "4"]
    assert load_prompts(f, 99, spread=True) == [str(i) for i in range(7)]
