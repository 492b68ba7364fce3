"""Does a drafter fit a target? The one home of the rules, used by the engines, ``peagle-lab check``,
``peagle-lab eval`` and serving (which sees only the two ``config.json`` files, before vLLM starts).

A drafter fits when it reads the target's features (same hidden size, from layers the target has,
the layers it was trained on) and speaks its vocabulary; a P-EAGLE drafter also needs a mask token
and is refused beyond the depth K it was trained for.

>>> fit_problems(expects_hidden=576, vocab=49152, taps=(2, 15, 27), target_hidden=576, target_vocab=32000,
...              target_layers=30)
['drafter vocab 49152 != target vocab 32000']
>>> read_mask_token_id({"pard_token": 0}), read_mask_token_id({"vocab_size": 9})
(0, None)
"""
from __future__ import annotations

# Where the published EAGLE-3 / P-EAGLE configs keep P-EAGLE's mask token id (ours writes the first).
MASK_TOKEN_KEYS = ("ptd_token_id", "pard_token", "mask_token_id")


class IncompatibleDrafter(ValueError):
    """The drafter was built for another target (sizes, vocab or taps differ)."""


def read_mask_token_id(raw: dict) -> int | None:
    """The mask token id a drafter's ``config.json`` names under any of :data:`MASK_TOKEN_KEYS`, or None
    (a sequential EAGLE-3 drafter)."""
    return next((raw[k] for k in MASK_TOKEN_KEYS if raw.get(k) is not None), None)


def fit_problems(*, expects_hidden, vocab, taps, target_hidden, target_vocab, target_layers,
                 target_taps=None) -> list[str]:
    """What keeps a drafter from reading a target, one sentence each; a value that is None is not checked.

    ``target_taps``: the layers the target hands over; None where the drafter's own are used (vLLM)."""
    problems = []
    if None not in (expects_hidden, target_hidden) and int(expects_hidden) != int(target_hidden):
        problems.append(f"drafter expects target hidden size {expects_hidden}, target has {target_hidden}")
    if None not in (vocab, target_vocab) and int(vocab) != int(target_vocab):
        problems.append(f"drafter vocab {vocab} != target vocab {target_vocab}")
    if taps is not None and target_taps is not None and tuple(taps) != tuple(target_taps):
        problems.append(f"drafter was trained on target layers {list(taps)}, target taps "
                        f"{list(target_taps)} (load the target with aux_layer_ids={tuple(taps)})")
    if taps is not None and target_layers is not None and any(i >= int(target_layers) for i in taps):
        problems.append(f"drafter taps layers {list(taps)} but the target has {target_layers}")
    return problems


def depth_problem(k: int | None, trained_depth: int | None) -> str | None:
    """A P-EAGLE drafter asked for more drafts per step than it was trained for, or None."""
    if k is not None and trained_depth is not None and k > int(trained_depth):
        return f"K={k} exceeds the depth this P-EAGLE drafter was trained for ({trained_depth})"
    return None


def drafting_method(drafter) -> str:
    """How a loaded drafter drafts: ``"dspark"`` (block + Markov head), ``"peagle"`` (parallel) or ``"eagle"``."""
    if hasattr(drafter, "markov_head"):
        return "dspark"
    return "peagle" if drafter.cfg.parallel_drafting else "eagle"


def check_compatible(drafter, target, k: int | None = None, *, parallel: bool | None = None) -> None:
    """Refuse a drafter (:class:`~peagle_lab.drafter.Eagle3Drafter`) that cannot work with ``target``
    (or with ``k`` drafts), naming the fix. The depth ``k`` is checked where the drafter drafts in parallel:
    ``parallel`` (default: as its checkpoint says, ``cfg.parallel_drafting``)."""
    c = drafter.cfg
    parallel = c.parallel_drafting if parallel is None else parallel
    problems = fit_problems(expects_hidden=c.target_hidden_size, vocab=c.vocab_size, taps=c.aux_layer_ids,
                            target_hidden=target.hidden_size, target_vocab=target.vocab_size,
                            target_layers=target.num_layers, target_taps=target.aux_layer_ids)
    if problems:
        raise IncompatibleDrafter("drafter does not fit this target: " + "; ".join(problems)
                                  + ". Train or pick a drafter for this target (peagle-lab info lists shipped ones).")
    too_deep = depth_problem(k, c.trained_depth) if parallel else None
    if too_deep:
        raise IncompatibleDrafter(f"{too_deep}; use --k <= {c.trained_depth} or retrain with a deeper COD depth")


def place_loaded(drafter, state: dict, dtype, target=None):
    """Load ``state`` (names and shapes already checked) into ``drafter``: its own dtypes, then ``dtype``, the
    vocabulary maps as long/bool; with ``target``, its fit is checked and the drafter moved beside it, sharing what
    it borrows. Returns it in eval mode."""
    import torch

    own = drafter.state_dict()
    drafter.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})
    drafter.to(dtype if dtype is not None else torch.float32)
    drafter.d2t, drafter.t2d = drafter.d2t.long(), drafter.t2d.bool()
    if target is not None:
        check_compatible(drafter, target)
        drafter.to(target.device)
        drafter.share_target_weights(target)
    return drafter.eval()
