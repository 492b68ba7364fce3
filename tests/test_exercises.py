"""Every check_* accepts the reference solution (notebooks/solutions/) and rejects a typical wrong
answer with a hint that names the mistake; an unwritten stub gets a hint, not a traceback."""
import json
from pathlib import Path

import pytest
import torch

from peagle_lab import exercises as ex
from helpers import random_drafter, tiny_target

SOL = {nb: ex.load_solutions(nb) for nb in ("01", "02", "03", "04", "05")}


def rejects(check, *args, match: str):
    with pytest.raises(ex.ExerciseFailed, match=match):
        check(*args, strict=True)


def stub(*args):
    raise NotImplementedError


@pytest.fixture(scope="module")
def setting():
    target = tiny_target(vocab=64, layers=5)
    ids = torch.arange(1, 12) % 64
    out = target.forward(ids, target.new_cache())
    ctx = torch.cat([ids[1:], out.logits[0, -1].argmax()[None]])
    return target, ctx, out.aux[0]


def test_stub_gives_a_hint_not_a_traceback(capsys):
    assert ex.check_verify_greedy(stub, strict=False) is False
    assert "not written yet" in capsys.readouterr().out
    rejects(ex.check_verify_greedy, stub, match="not written yet")
    rejects(ex.check_verify_greedy, lambda d, l: 1 / 0, match="ZeroDivisionError")


def test_verify_greedy():
    assert ex.check_verify_greedy(SOL["01"].my_verify_greedy, strict=True)
    # counts every match, not only the leading ones
    rejects(ex.check_verify_greedy, lambda d, l: (int((d == l[:-1].argmax(-1)).sum()), 0), match="first mismatch")
    # right count, forgets that the next token sits in slot n
    rejects(ex.check_verify_greedy,
            lambda d, l: (SOL["01"].my_verify_greedy(d, l)[0], int(l[-1].argmax())), match="slot n")


def test_draft_sequential(setting):
    target, ctx, aux = setting
    d = random_drafter(target, parallel=False, draft_vocab_size=32)
    assert ex.check_draft_sequential(SOL["01"].my_draft_sequential, d, ctx, aux, strict=True)

    def draft_vocab_ids(drafter, cache, ctx_tokens, ctx_aux, k):    # forgets to map draft-vocab ids to the target's
        ids, hidden, out = ctx_tokens[None], drafter.project(ctx_aux)[None], []
        for _ in range(k):
            prenorm, logits = drafter(ids, hidden, cache)
            tok = logits[:, -1].argmax(-1)
            out.append(tok)
            ids, hidden = drafter.to_target_ids(tok)[None], prenorm[:, -1:]
        return torch.cat(out)
    rejects(ex.check_draft_sequential, draft_vocab_ids, d, ctx, aux, match="draft 1 .*to_target_ids")


def test_draft_parallel(setting):
    target, ctx, aux = setting
    d = random_drafter(target, parallel=True, num_layers=2)
    assert ex.check_draft_parallel(SOL["02"].my_draft_parallel, d, ctx, aux, strict=True)

    def off_by_one(drafter, cache, ctx_tokens, ctx_aux, k):         # reads the outputs one slot late
        out = SOL["02"].my_draft_parallel(drafter, cache, ctx_tokens, ctx_aux, k + 1)
        return out[1:]
    rejects(ex.check_draft_parallel, off_by_one, d, ctx, aux, match="mask slots")


def test_verify_sampling():
    assert ex.check_verify_sampling(SOL["02"].my_verify_sampling, strict=True)

    def always_accept_p_over_q(drafts, q, p, g):                    # accepts with p/q unclipped, resamples from p
        for i, x in enumerate(drafts.tolist()):
            if float(torch.rand(1, generator=g)) < float(p[i, x]):
                continue
            return i, int(torch.multinomial(p[i], 1, generator=g))
        return len(drafts), int(torch.multinomial(p[-1], 1, generator=g))
    rejects(ex.check_verify_sampling, always_accept_p_over_q,
            match="must be accepted|total variation|max\\(0, p - q\\)")


def test_peagle_mask():
    assert ex.check_peagle_mask(SOL["03"].my_peagle_mask, strict=True)

    def causal_only(q, k):                                          # a plain causal mask over anchors
        return q.anchor[:, None] >= k.anchor[None, :]
    rejects(ex.check_peagle_mask, causal_only, match="query \\(anchor")


def test_partition():
    from peagle_lab.train.cod import cod_sample
    el = cod_sample(40, 4, 0.7, generator=torch.Generator().manual_seed(0))
    assert ex.check_partition(SOL["03"].my_partition, el, 40, strict=True)
    rejects(ex.check_partition, lambda el, n, s: [(list(range(len(el))), [])], el, 40, match="segments")


def test_expand_input_ids():
    batch = dict(target_token_ids=torch.tensor([10, 11, 12, 13, 20, 21, 22, 23], dtype=torch.int32),
                 target_positions=torch.tensor([5, 6, 7, 8, 10, 11, 12, 13]),
                 next_token_ids=torch.tensor([100, 200], dtype=torch.int32),
                 query_start_loc=torch.tensor([0, 4, 8], dtype=torch.int32),
                 query_end_loc=torch.tensor([2, 7], dtype=torch.int32),
                 padding_token_id=0, parallel_drafting_token_id=-2, num_padding_slots_per_request=3)
    assert ex.check_expand_input_ids(SOL["04"].my_input_ids, [batch], strict=True)

    def no_padding(b):                                              # forgets the rejected tokens' slots
        out = SOL["04"].my_input_ids(b)
        return [x for x in out if x != b["padding_token_id"]]
    rejects(ex.check_expand_input_ids, no_padding, [batch], match="padding id per rejected")


def test_speculative_config():
    assert ex.check_speculative_config(SOL["05"].my_speculative_config, strict=True)

    def method_name(method, drafter, k):                            # passes "peagle" to vLLM as its method
        right = SOL["05"].my_speculative_config(method, drafter, k)
        return dict(right, method="eagle3" if method == "eagle" else method)
    rejects(ex.check_speculative_config, method_name, match="'method'.*eagle3")

    def always_parallel(method, drafter, k):                        # switches parallel drafting on for EAGLE-3 too
        return dict(SOL["05"].my_speculative_config(method, drafter, k), parallel_drafting=True)
    rejects(ex.check_speculative_config, always_parallel, match="P-EAGLE only")

    def k_as_string(method, drafter, k):                            # right value, wrong JSON type
        return dict(SOL["05"].my_speculative_config(method, drafter, k), num_speculative_tokens=str(k))
    rejects(ex.check_speculative_config, k_as_string, match="num_speculative_tokens")
    rejects(ex.check_speculative_config, stub, match="not written yet")


def test_a_pass_says_when_the_reference_solution_was_filled_in(monkeypatch, capsys):
    monkeypatch.setenv("PEAGLE_SOLUTIONS", "1")
    assert ex.check_verify_greedy(SOL["01"].my_verify_greedy)
    assert "(reference solution filled in)" in capsys.readouterr().out
    monkeypatch.setenv("PEAGLE_SOLUTIONS", "0")
    monkeypatch.setenv("PEAGLE_SMOKE", "1")            # the small settings alone never swap a learner's code
    assert ex.check_verify_greedy(SOL["01"].my_verify_greedy)
    out = capsys.readouterr().out
    assert "matches the library" in out and "filled in" not in out


def test_solution_if_asked(monkeypatch):
    monkeypatch.setenv("PEAGLE_SOLUTIONS", "1")
    def my_verify_greedy(d, l):
        raise NotImplementedError
    assert ex.solution_if_asked("01", my_verify_greedy) is not my_verify_greedy
    monkeypatch.setenv("PEAGLE_SOLUTIONS", "0")
    monkeypatch.setenv("PEAGLE_SMOKE", "1")            # the small settings alone never swap a learner's code
    assert ex.solution_if_asked("01", my_verify_greedy) is my_verify_greedy


def test_compare_prints_prediction_beside_measurement(capsys):
    assert ex.compare(1.0, 1.05, "ratio") is True
    assert ex.compare(2.0, 1.0, "ratio") is False
    assert ex.compare(None, 1.0, "ratio") is None
    out = capsys.readouterr().out
    assert "you predicted 1" in out and "measured 1" in out


def test_05_exercise_is_a_stub_the_library_checks():
    """Notebook 05 ships its exercise unwritten, like 01-04: a stub, the reference behind solution_if_asked."""
    nb = Path(__file__).resolve().parents[1] / "notebooks" / "05_serving.ipynb"
    cells = ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    ex_cells = [t for t in cells if "ex.check_speculative_config" in t]
    assert ex_cells and all("raise NotImplementedError" in t and 'solution_if_asked("05"' in t for t in ex_cells)


def test_every_checker_has_a_wrong_answer_test():
    """Each check_* in peagle_lab.exercises is fed a wrong answer above and reports a failure (ExerciseFailed
    in strict mode, False otherwise): a checker that passed anything would teach nothing."""
    checkers = {n for n in dir(ex) if n.startswith("check_")}
    tested = {n for n in checkers if f"rejects(ex.{n}," in Path(__file__).read_text()}
    assert checkers == tested, f"checkers without a wrong-answer test: {sorted(checkers - tested)}"


@pytest.mark.parametrize("check, args", [
    ("check_verify_greedy", ()),
    ("check_verify_sampling", ()),
    ("check_peagle_mask", ()),
    ("check_speculative_config", ()),
])
def test_a_wrong_answer_reports_false_when_not_strict(check, args, capsys):
    """Without strict mode a wrong answer prints a ✗ line and returns False (the notebook keeps running)."""
    def wrong(*a):
        return {"wrong": True} if check == "check_speculative_config" else (0, 0)
    if check == "check_peagle_mask":
        def wrong(q, k):                                            # everything visible
            return torch.ones(len(q.anchor), len(k.anchor), dtype=torch.bool)
    assert getattr(ex, check)(wrong, *args, strict=False) is False
    assert "✗" in capsys.readouterr().out


NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.parametrize("name, answer", [
    ("01", "getsource(draft_sequential)"), ("01", "getsource(verify_greedy)"),
    ("02", "getsource(draft_parallel)"), ("02", "getsource(verify_sampling)"),
    ("03", "getsource(peagle_mask)"), ("03", "getsource(partition)"),
    ("04", "getsource(copy_and_expand_eagle_inputs_torch)"), ("04", "getsource(_expand_body)"),
    ("05", "serve_command(cfg"),
])
def test_no_answer_is_shown_before_its_exercise(name, answer):
    """A cell that prints an exercise's answer (the library's source, or 05's server command with the JSON)
    comes after the exercise's check cell, never before it."""
    path = next(NOTEBOOKS.glob(f"{name}_*.ipynb"))
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    check = min(i for i, t in enumerate(cells) if "ex.check_" in t and "raise NotImplementedError" in t)
    shown = [i for i, t in enumerate(cells) if answer in t]
    assert shown and min(shown) > check, f"{path.name}: {answer} printed in code cell {min(shown)}, before the check"
