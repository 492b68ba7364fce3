"""Exercises that check: run the learner's function against the library's oracle and say what is wrong.

Each ``check_*`` returns True when the learner's function agrees with the library on every case it
tries. When it does not, it prints a hint (the first case that differs, and what to look at) and
returns False, so a notebook run top to bottom keeps going; with ``strict=True`` (or when the
reference solutions are filled in, see :func:`solution_if_asked`) it raises :class:`ExerciseFailed`
with the same text instead.

>>> def wrong(drafts, logits):        # always answers from the first slot
...     return 0, int(logits[0].argmax())
>>> check_verify_greedy(wrong, strict=False)                     # doctest: +ELLIPSIS
✗ verify_greedy: ...
False
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch

from .engines import drafting, verify          # the library's versions are the oracles


class ExerciseFailed(AssertionError):
    """A learner's answer differs from the library's; the message says where."""


def solutions_on() -> bool:
    """Whether notebooks fill in the reference solutions: only when ``PEAGLE_SOLUTIONS=1`` (``make test`` sets it,
    so CI checks every solution); the small settings (``PEAGLE_SMOKE=1``) leave a learner's own code in place."""
    return os.environ.get("PEAGLE_SOLUTIONS", "").strip().lower() in ("1", "true", "yes")


def _solutions_dir() -> Path | None:
    for d in (Path.cwd() / "solutions", Path.cwd() / "notebooks" / "solutions",
              Path(__file__).resolve().parents[1] / "notebooks" / "solutions"):
        if d.is_dir():
            return d
    return None


def load_solutions(notebook: str):
    """The module ``notebooks/solutions/<notebook>*.py`` (e.g. ``"01"``)."""
    d = _solutions_dir()
    found = sorted(d.glob(f"{notebook}*.py")) if d else []
    if not found:
        raise FileNotFoundError(f"no solutions for notebook {notebook!r}: expected notebooks/solutions/{notebook}_*.py "
                                "(they ship with a checkout of the repository)")
    spec = importlib.util.spec_from_file_location(f"peagle_solutions_{notebook}", found[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def solution_if_asked(notebook: str, fn):
    """The reference solution of the same name when solutions are on (:func:`solutions_on`), else ``fn``."""
    if not solutions_on():
        return fn
    return getattr(load_solutions(notebook), fn.__name__)


def _report(name: str, problem: str | None, strict: bool | None) -> bool:
    strict = solutions_on() if strict is None else strict
    if problem is None:
        filled = " (reference solution filled in)" if solutions_on() else ""
        print(f"✓ {name}: matches the library on every case tried{filled}")
        return True
    text = f"✗ {name}: {problem}"
    if strict:
        raise ExerciseFailed(text)
    print(text)
    return False


def _call(fn, *args):
    """(result, None) or (None, hint) when the learner's function raises."""
    try:
        with torch.inference_mode():       # as the library's drafting runs: no autograd bookkeeping
            return fn(*args), None
    except NotImplementedError:
        return None, ("not written yet: replace the `raise NotImplementedError` with your code "
                      "(a reference answer is in notebooks/solutions/)")
    except Exception as e:     # the learner's bug: name it in one line, not a traceback
        return None, f"your function raised {type(e).__name__}: {e}"


def _tolist(x):
    return x.tolist() if torch.is_tensor(x) else list(x)


# ---- 01: sequential drafting and the greedy accept rule ----------------------------------------

def check_verify_greedy(fn, cases: int = 200, strict: bool | None = None) -> bool:
    """``fn(drafts (K,), logits (K+1, V)) -> (n, next_token)`` against ``verify_greedy``."""
    g = torch.Generator().manual_seed(1)
    for _ in range(cases):
        k = int(torch.randint(1, 9, (1,), generator=g))
        logits = torch.randn(k + 1, 4, generator=g)           # 4 tokens: drafts often agree
        drafts = logits[:-1].argmax(-1).where(torch.rand(k, generator=g) < 0.7, torch.randint(0, 4, (k,), generator=g))
        want = verify.verify_greedy(drafts, logits)
        got, err = _call(fn, drafts, logits)
        if err:
            return _report("verify_greedy", err, strict)
        try:
            got = (int(got[0]), int(got[1]))
        except Exception:
            return _report("verify_greedy", f"return a pair (n, next_token), not {got!r}", strict)
        if got != want:
            choice = logits.argmax(-1).tolist()
            hint = ("n counts the leading drafts equal to the target's argmax and stops at the first mismatch"
                    if got[0] != want[0] else
                    f"the next token is the target's argmax in slot n={want[0]} (a correction, or the bonus "
                    "token when every draft was accepted)")
            return _report("verify_greedy", f"drafts {drafts.tolist()}, target argmax per slot {choice}: "
                           f"you returned {got}, expected {want}. {hint}", strict)
    return _report("verify_greedy", None, strict)


def _check_drafts(name: str, fn, oracle, drafter, ctx_tokens, ctx_aux, ks, strict, hint: str) -> bool:
    for k in ks:
        want = oracle(drafter, drafter.new_cache(), ctx_tokens, ctx_aux, k=k).tokens.tolist()
        got, err = _call(fn, drafter, drafter.new_cache(), ctx_tokens, ctx_aux, k)
        if err:
            return _report(name, err, strict)
        got = _tolist(got)
        if len(got) != k:
            return _report(name, f"K={k}: return K={k} draft tokens, not {len(got)}", strict)
        if got != want:
            i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            return _report(name, f"K={k}: draft {i + 1} is {got[i]}, the library's is {want[i]} "
                           f"(the first {i} agree). {hint}", strict)
    return _report(name, None, strict)


def check_draft_sequential(fn, drafter, ctx_tokens, ctx_aux, ks=(1, 3, 5), strict: bool | None = None) -> bool:
    """``fn(drafter, cache, ctx_tokens, ctx_aux, k) -> (K,) target ids`` against ``draft_sequential``."""
    return _check_drafts("draft_sequential", fn, drafting.draft_sequential, drafter, ctx_tokens, ctx_aux, ks, strict,
                         "After the first pass, feed back one slot: the draft just picked and the drafter's own "
                         "prenorm hidden state at the last slot; map draft-vocab ids with drafter.to_target_ids.")


# ---- 02: parallel drafting and rejection sampling ----------------------------------------------

def check_draft_parallel(fn, drafter, ctx_tokens, ctx_aux, ks=(1, 3, 5), strict: bool | None = None) -> bool:
    """``fn(drafter, cache, ctx_tokens, ctx_aux, k) -> (K,) target ids`` against ``draft_parallel``."""
    return _check_drafts("draft_parallel", fn, drafting.draft_parallel, drafter, ctx_tokens, ctx_aux, ks, strict,
                         "One pass over [context, K-1 mask slots]: mask ids are drafter.cfg.mask_token_id, their "
                         "hidden state drafter.projected_mask_hidden(); the drafts are the last K outputs.")


def check_verify_sampling(fn, samples: int = 4000, strict: bool | None = None) -> bool:
    """``fn(drafts (K,), draft_probs (K, V), target_probs (K+1, V), generator) -> (n, next_token)``:
    the first emitted token must follow the target's distribution whatever the drafter's is."""
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]])     # target, K=1: (2, V)
    q = torch.tensor([[0.1, 0.2, 0.3, 0.4]])                                # drafter (1, V)
    # sure cases first: q == p accepts every draft; a draft the target never writes is rejected
    for drafts, qq, want_n in ((torch.tensor([2]), p[:1], 1), (torch.tensor([3]), q, None)):
        pp = p.clone()
        if want_n is None:
            pp[0] = torch.tensor([0.6, 0.4, 0.0, 0.0])
        got, err = _call(fn, drafts, qq, pp, g)
        if err:
            return _report("verify_sampling", err, strict)
        n, tok = int(got[0]), int(got[1])
        if want_n == 1 and n != 1:
            return _report("verify_sampling", "with q equal to p every draft must be accepted (min(1, p/q) = 1), "
                           f"yours accepted {n} of 1", strict)
        if want_n is None and (n != 0 or pp[0, tok] == 0):
            return _report("verify_sampling", "a draft the target gives probability 0 must be rejected and the token "
                           "resampled from max(0, p - q) renormalised; yours returned "
                           f"(n={n}, token={tok})", strict)
    counts = torch.zeros(4)
    for _ in range(samples):
        d = torch.multinomial(q[0], 1, generator=g)
        got, err = _call(fn, d, q, p, g)
        if err:
            return _report("verify_sampling", err, strict)
        n, tok = int(got[0]), int(got[1])
        counts[int(d) if n == 1 else tok] += 1
    freq = counts / samples
    tv = 0.5 * float((freq - p[0]).abs().sum())
    if tv > 0.04:
        seen = [round(x, 3) for x in freq.tolist()]
        return _report("verify_sampling", f"first tokens came out as {seen}, the target's "
                       f"distribution is {p[0].tolist()} (total variation {tv:.3f}). Accept draft x with probability "
                       "min(1, p(x)/q(x)); on rejection sample from max(0, p - q) renormalised", strict)
    return _report("verify_sampling", None, strict)


# ---- 03: the P-EAGLE attention mask and sequence partitioning -----------------------------------

def check_peagle_mask(fn, strict: bool | None = None) -> bool:
    """``fn(q: Elements, k: Elements) -> (Eq, Ek) bool`` against ``peagle_mask`` on COD samples."""
    from .train.cod import cod_sample, peagle_mask
    for seed in range(5):
        el = cod_sample(12, 4, 0.7, generator=torch.Generator().manual_seed(seed))
        want = peagle_mask(el, el)
        got, err = _call(fn, el, el)
        if err:
            return _report("peagle_mask", err, strict)
        got = torch.as_tensor(got).bool()
        if got.shape != want.shape:
            return _report("peagle_mask", f"shape {tuple(got.shape)}, expected (queries, keys) = {tuple(want.shape)}",
                           strict)
        bad = (got != want).nonzero()
        if len(bad):
            i, j = bad[0].tolist()
            qa, qd, ka, kd = int(el.anchor[i]), int(el.depth[i]), int(el.anchor[j]), int(el.depth[j])
            yours, truth = ("visible" if got[i, j] else "hidden"), ("visible" if want[i, j] else "hidden")
            return _report("peagle_mask", f"query (anchor {qa}, depth {qd}) and key (anchor {ka}, depth {kd}): "
                           f"you said {yours}, the mask says {truth}. "
                           "A key is visible if it is a depth-0 element at or before the query's anchor, or an element "
                           "of the query's own anchor at a depth up to the query's (same document only)", strict)
    return _report("peagle_mask", None, strict)


def check_partition(fn, el, seq_len: int, segments=range(1, 9), strict: bool | None = None) -> bool:
    """``fn(el, seq_len, num_segments) -> [(own, context), ...]`` against ``partition``."""
    from .train.cod import partition
    for s in segments:
        want = [(sg.own.tolist(), sg.context.tolist()) for sg in partition(el, seq_len, s)]
        got, err = _call(fn, el, seq_len, s)
        if err:
            return _report("partition", err, strict)
        got = [(_tolist(o), _tolist(c)) for o, c in got]
        if got != want:
            return _report("partition", f"{s} segments: {len(got)} segments in your plan, "
                           f"{len(want)} in the library's; "
                           "depth 0 and 1 go to the segment of their position, depth >= 2 to their parent's, and each "
                           "segment sees every earlier segment's depth-0 elements as context", strict)
    return _report("partition", None, strict)


# ---- 04: the ragged drafter batch ------------------------------------------------------------

def check_expand_input_ids(fn, batches, strict: bool | None = None) -> bool:
    """``fn(batch) -> list of input ids`` against ``copy_and_expand_eagle_inputs(backend="torch")``."""
    from .kernels import copy_and_expand_eagle_inputs
    for n, b in enumerate(batches):
        want = copy_and_expand_eagle_inputs(**b, backend="torch").input_ids.tolist()
        got, err = _call(fn, b)
        if err:
            return _report("input_ids", err, strict)
        got = _tolist(got)
        if got != want:
            i = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            yours, truth = (got[i] if i < len(got) else "(missing)"), (want[i] if i < len(want) else "(none)")
            return _report("input_ids", f"batch {n}: {len(got)} ids (expected {len(want)}), "
                           f"first difference at slot {i}: yours {yours}, expected {truth}. "
                           "Per request: accepted tokens shifted by one, the target's token, K-1 mask ids, then one "
                           "padding id per rejected token", strict)
    return _report("input_ids", None, strict)


# ---- 05: the speculative config vLLM gets ------------------------------------------------------

_SPEC_HINTS = {
    "method": '"method" stays "eagle3" for both drafters: they share EAGLE-3\'s checkpoint layout',
    "model": '"model" is the drafter\'s folder or Hugging Face id, as a string',
    "num_speculative_tokens": '"num_speculative_tokens" is K, the drafts per step',
    "parallel_drafting": '"parallel_drafting" is True for P-EAGLE only: it is the whole switch to single-pass drafting',
}


def check_speculative_config(fn, drafters=("drafters/peagle-smollm2", "amazon/gpt-oss-20b-p-eagle"), ks=(1, 3, 7),
                             strict: bool | None = None) -> bool:
    """``fn(method, drafter, k) -> dict`` against ``speculative_config`` (the JSON of ``--speculative-config``)."""
    from .serving.server import ServeConfig, speculative_config
    for method in ("eagle", "peagle"):
        for drafter in map(str, drafters):
            for k in ks:
                want = speculative_config(ServeConfig(target="openai/gpt-oss-20b", method=method, drafter=drafter, k=k))
                got, err = _call(fn, method, drafter, k)
                if err:
                    return _report("speculative_config", err, strict)
                if not isinstance(got, dict):
                    return _report("speculative_config", f"return a dict, not {type(got).__name__}", strict)
                case = f"method={method!r}, drafter={drafter!r}, k={k}"
                extra = sorted(set(got) - set(want))
                if extra:
                    return _report("speculative_config", f"{case}: keys vLLM is not given here: {extra}; "
                                   f"the keys are {sorted(want)}", strict)
                for key in want:
                    if key not in got:
                        return _report("speculative_config", f"{case}: key {key!r} missing. {_SPEC_HINTS[key]}",
                                       strict)
                    if got[key] != want[key] or type(got[key]) is not type(want[key]):
                        return _report("speculative_config", f"{case}: {key!r} is {got[key]!r}, expected "
                                       f"{want[key]!r}. {_SPEC_HINTS[key]}", strict)
    return _report("speculative_config", None, strict)


# ---- predict, then measure ---------------------------------------------------------------------

def compare(prediction, measured: float, what: str, rel: float = 0.15) -> bool | None:
    """Print a prediction beside its measurement. None when no prediction was written."""
    if prediction is None:
        print(f"{what}: measured {measured:.3g} (write your prediction first next time)")
        return None
    off = (float(prediction) - measured) / measured if measured else float("inf")
    ok = abs(off) <= rel
    print(f"{what}: you predicted {float(prediction):.3g}, measured {measured:.3g} ({off:+.0%}) "
          + ("✓ close" if ok else "✗ what did the prediction leave out?"))
    return ok
