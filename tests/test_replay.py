"""`peagle-lab eval`: acceptance replayed offline equals the engine's, pooled per category; prompt categories;
the command's output and refusals."""
import json

import pytest

from peagle_lab.cli import main
from peagle_lab.compat import IncompatibleDrafter, drafting_method
from peagle_lab.checkpoint import load_drafter
from peagle_lab.drafters_registry import shipped
from peagle_lab.engines.teaching import generate
from peagle_lab.prompts import PromptFileError, load_categories, load_prompts
from peagle_lab.stats import AcceptanceStats
from peagle_lab.train.replay import al_by_category, evaluate_drafters, greedy_replies

K, NEW = 3, 24


@pytest.fixture(scope="module")
def shipped_drafters(target):
    if len(shipped()) < 2:
        pytest.fail("the shipped drafters (peagle_lab/drafters/) are missing from this checkout")
    return {name: load_drafter(path, target) for name, path in shipped().items()}


def test_evaluate_equals_the_engine_per_drafter_and_per_category(target, shipped_drafters):
    every, every_cat = load_prompts("mt-bench"), load_categories("mt-bench")
    pick = [0, 1, 40]                                            # two writing prompts (pooled), one coding prompt
    cats = [every_cat[i] for i in pick]
    assert cats == ["writing", "writing", "coding"]
    prompts = [target.chat_ids(every[i]) for i in pick]
    replies = greedy_replies(target, prompts, k=K, max_new_tokens=NEW)
    res = evaluate_drafters(target, shipped_drafters, prompts, replies, k=K, max_new_tokens=NEW, categories=cats)
    assert set(res) == set(shipped_drafters)
    for name, drafter in shipped_drafters.items():
        method = drafting_method(drafter)
        per_prompt = [generate(target, ids, method=method, drafter=drafter, k=K, max_new_tokens=NEW).acceptance
                      for ids in prompts]
        pooled = per_prompt[0].merge(per_prompt[1]).merge(per_prompt[2])
        r = res[name]
        assert r["method"] == method
        assert r["steps"] == pooled.num_drafts
        assert r["acceptance_length"] == pytest.approx(pooled.acceptance_length, abs=1e-4)
        assert r["acceptance_per_position"] == pytest.approx(pooled.per_position, abs=1e-4)
        assert r["drafts_accepted_per_prompt"] == [[s.num_drafts, s.num_accepted_tokens] for s in per_prompt]
        by_cat = r["acceptance_length_by_category"]
        assert list(by_cat) == ["writing", "coding"]
        assert by_cat["writing"] == pytest.approx(per_prompt[0].merge(per_prompt[1]).acceptance_length, abs=1e-4)
        assert by_cat["coding"] == pytest.approx(per_prompt[2].acceptance_length, abs=1e-4)
        assert pooled.num_accepted_tokens > 0, f"{name} accepted nothing: the shipped drafter does not fit the target"
        # where a step started, the first draft agrees with the real token exactly when the step accepted it
        assert r["agreement_visited_positions"][0] == pytest.approx(r["acceptance_per_position"][0], abs=1e-4)
        assert 0.0 < r["draft_vocab_coverage"] <= 1.0
        assert len(r["agreement_all_positions"]) == len(r["agreement_visited_positions"]) == K


def test_evaluate_refuses_what_the_engine_refuses(target, shipped_drafters):
    with pytest.raises(ValueError, match="one reply"):
        evaluate_drafters(target, shipped_drafters, [[1, 2]], [], k=K, max_new_tokens=NEW)
    with pytest.raises(ValueError, match="one category"):
        evaluate_drafters(target, shipped_drafters, [[1, 2]], [[3, 4]], k=K, max_new_tokens=NEW, categories=[])
    with pytest.raises(ValueError, match="at least one prompt"):
        evaluate_drafters(target, shipped_drafters, [], [], k=K, max_new_tokens=NEW)
    with pytest.raises(ValueError, match="must be >= 1"):
        evaluate_drafters(target, shipped_drafters, [[1, 2]], [[3, 4]], k=0, max_new_tokens=NEW)
    peagle = {n: d for n, d in shipped_drafters.items() if d.cfg.parallel_drafting}
    depth = next(iter(peagle.values())).cfg.trained_depth
    with pytest.raises(IncompatibleDrafter, match="exceeds the depth"):
        evaluate_drafters(target, peagle, [[1, 2]], [[3] * 40], k=depth + 1, max_new_tokens=NEW)


def test_al_by_category_pools_drafts_and_skips_unlabelled():
    out = al_by_category([[10, 5], [10, 15], [5, 0], [3, 3]], ["a", "b", "a", None])
    assert out == {"a": pytest.approx(1 + 5 / 15, abs=1e-4), "b": pytest.approx(2.5)}   # rounded to 4 places


def test_categories_follow_the_prompt_selection(tmp_path):
    cats = load_categories("mt-bench")
    assert len(cats) == len(load_prompts("mt-bench")) == 80
    assert [cats.count(c) for c in dict.fromkeys(cats)] == [10] * 8
    assert load_categories("mt-bench", 8, spread=True) == list(dict.fromkeys(cats))
    assert load_categories("mt-bench", 3) == ["writing"] * 3
    assert load_categories("humaneval", 2) == [None, None]
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a", "category": "x"}\n\n{"turns": ["b"]}\n{"prompt": "c", "category": "y"}\n')
    assert load_prompts(f) == ["a", "b", "c"]
    assert load_categories(f) == ["x", None, "y"]
    assert load_categories(f, 2, spread=True) == ["x", None]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{oops\n')
    with pytest.raises(PromptFileError, match="bad.jsonl:2"):
        load_categories(bad)


def test_eval_command_writes_results_and_names_a_bad_drafter(tmp_path, capsys):
    out = tmp_path / "eval.json"
    folder = shipped()["peagle-smollm2"]
    assert main(["eval", f"mine={folder}", "eagle-smollm2", "--num-prompts", "1", "--max-new-tokens", "8",
                 "--k", "3", "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert set(rec["results"]) == {"mine", "eagle-smollm2"}
    assert rec["drafters"]["mine"] == str(folder)
    assert rec["results"]["mine"]["method"] == "peagle" and rec["results"]["eagle-smollm2"]["method"] == "eagle"
    assert rec["settings"]["num_prompts"] == 1 and rec["settings"]["k"] == 3
    assert rec["results"]["mine"]["acceptance_length_by_category"] == {
        "writing": rec["results"]["mine"]["acceptance_length"]}
    printed = capsys.readouterr().out
    assert "mine" in printed and "by category: writing" in printed
    with pytest.raises(SystemExit, match="exceeds the depth"):   # bad drafter specs: tests/test_bad_input.py
        main(["eval", "peagle-smollm2", "--num-prompts", "1", "--k", "99"])
    for flag in ("--k", "--num-prompts", "--max-new-tokens"):
        with pytest.raises(SystemExit) as err:
            main(["eval", "peagle-smollm2", flag, "0"])
        assert err.value.code == 2                                  # argparse: "expected a whole number >= 1"
    odd = tmp_path / "lr=1e-3"                                      # a folder whose name holds "=" stays whole
    odd.mkdir()
    for f in folder.iterdir():
        (odd / f.name).write_bytes(f.read_bytes())
    assert main(["eval", str(odd), "--num-prompts", "1", "--max-new-tokens", "8", "--k", "3"]) == 0
