"""Evaluation: a drafter's acceptance without the engine, by replaying greedy decoding over a known reply.

At T=0 speculative decoding produces exactly the target's greedy reply, so every step of it is
determined by that reply: a step standing at anchor ``a`` (features known up to ``a``, token
``x_{a+1}`` just produced) accepts the leading drafts that equal ``x_{a+2}, x_{a+3}, ...`` and moves
to ``a + n + 1``. The drafts of anchor ``a`` are what the *training* graph computes for the elements
``(a, 0 .. K-1)`` (``tests/test_train_infer.py`` shows the two graphs agree), so one batched forward
over the reply gives every step at once:

* the per-step accepted counts, by the engine's own accept rule
  (:func:`~peagle_lab.engines.frame.accepted_prefix`; identical to the engine's, which ``tests`` check),
  hence AL and acceptance per position in a fraction of the engine's time;
* the agreement per depth over *every* reply position (what a training log reports, but against the
  real next token rather than the target's best draft-vocabulary token), next to the same agreement
  over the anchors the decoding actually visited. The two differ because steps start right after a
  rejection: hard stretches of text get many short steps, easy ones few long steps.

Over a prompt set: :func:`greedy_replies` (the target's replies, once), :func:`replay_prompts` (one
drafter over all of them: what ``peagle-lab eval`` and the trainer's validation AL report) and
:func:`evaluate_drafters` (several drafters, the table ``peagle-lab eval`` prints).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..compat import check_compatible, drafting_method
from ..drafter import Eagle3Drafter
from ..engines.frame import accepted_prefix
from ..stats import AcceptanceStats
from .cod import Elements
from .data import Sample
from .features import target_batch
from .loss import element_outputs


@dataclass
class Replay:
    """What replaying one or more replies gave."""
    k: int
    stats: AcceptanceStats
    steps: list[list[int]] = field(default_factory=list)      # accepted count per step, per reply
    hits_all: torch.Tensor | None = None      # (K,) drafts equal to the real token, over every anchor
    count_all: torch.Tensor | None = None     # (K,) anchors scored per depth
    hits_visited: torch.Tensor | None = None  # (K,) the same over the anchors the decoding stood at
    count_visited: torch.Tensor | None = None
    in_vocab: int = 0                         # reply tokens inside the draft vocabulary
    reply_tokens: int = 0

    def agreement_all(self) -> list[float]:
        return (self.hits_all / self.count_all.clamp(min=1)).tolist()

    def agreement_visited(self) -> list[float]:
        return (self.hits_visited / self.count_visited.clamp(min=1)).tolist()

    @property
    def coverage(self) -> float:
        return self.in_vocab / max(self.reply_tokens, 1)

    def merge(self, other: "Replay") -> "Replay":
        return Replay(self.k, self.stats.merge(other.stats), self.steps + other.steps,
                      self.hits_all + other.hits_all, self.count_all + other.count_all,
                      self.hits_visited + other.hits_visited, self.count_visited + other.count_visited,
                      self.in_vocab + other.in_vocab, self.reply_tokens + other.reply_tokens)


def _elements(n: int, first_anchor: int, k: int, method: str) -> Elements:
    """Depth 0 at every position (the context), depths 1..K-1 at the reply's anchors.

    Depth d of anchor a reads x_{a+1+d} (EAGLE-3) and predicts x_{a+2+d}: both must exist."""
    anchors = [torch.arange(n - 1)]
    for d in range(1, k):
        a = torch.arange(first_anchor, n - 2 - d)
        if a.numel() == 0:
            break
        anchors.append(a)
    depth = torch.cat([torch.full_like(a, d) for d, a in enumerate(anchors)])
    return Elements(torch.cat(anchors), depth)


@torch.no_grad()
def replay_acceptance(target, drafter: Eagle3Drafter, prompt_ids: list[int], reply_ids: list[int], *,
                      method: str, k: int, max_new_tokens: int | None = None, eos: tuple[int, ...] = ()) -> Replay:
    """Replay greedy speculative decoding of ``reply_ids`` (the target's greedy continuation).

    ``max_new_tokens``: stop where the engine would (default: ``len(reply_ids) - k - 1``, so every
    step's drafts can be checked; generate the reply with ``k + 1`` tokens to spare, and past any
    EOS: ``generate(..., stop_at_eos=False)``). ``eos``: also stop, as the engine does, once a
    produced token is one of these (the engine's last step may still accept drafts past it).
    """
    if method not in ("peagle", "eagle", "dspark"):
        raise ValueError(f"unknown method {method!r}; use 'peagle', 'eagle' or 'dspark'")
    budget = len(reply_ids) - k - 1 if max_new_tokens is None else max_new_tokens
    if budget < 1 or budget + k + 1 > len(reply_ids):
        raise ValueError(f"a reply of {len(reply_ids)} tokens replays at most {len(reply_ids) - k - 1} new tokens "
                         f"at K={k}: generate the reply with K+1 tokens more than max_new_tokens")
    full = torch.tensor(list(prompt_ids) + list(reply_ids))
    n, first = full.numel(), len(prompt_ids) - 1
    draft_ids = drafter.to_target_ids(torch.arange(drafter.cfg.draft_vocab_size, device=drafter.d2t.device))
    data = target_batch(target, [Sample(full, len(prompt_ids))], draft_ids.sort().values, n)
    el = _elements(n, first, k, method)
    el = Elements(el.anchor.to(data.tokens.device), el.depth.to(data.tokens.device))
    logits = element_outputs(drafter, el, data, method)                       # (E, Vd)
    pred = drafter.to_target_ids(logits.argmax(-1)).cpu()
    anchor, depth = el.anchor.cpu(), el.depth.cpu()
    # Row i is anchor first + i. drafts[i, d]: the draft of (first + i, d), known where its real token exists;
    # real[i, j]: the real token x_{first+i+2+j}, j = 0..K, which the target chooses at T=0 (-2 past the end).
    width = n - 1 - first
    drafts = torch.full((width, k), -1, dtype=torch.long)                  # (W, K)
    known = torch.zeros(width, k, dtype=torch.bool)
    sel = anchor >= first
    a, d = anchor[sel] - first, depth[sel]
    inside = anchor[sel] + 2 + depth[sel] < n
    drafts[a[inside], d[inside]] = pred[sel][inside].long()
    known[a[inside], d[inside]] = True
    at = first + 2 + torch.arange(width)[:, None] + torch.arange(k + 1)    # (W, K+1) positions in full
    real = torch.where(at < n, full[at.clamp(max=n - 1)], -2)               # (W, K+1)
    ok = drafts == real[:, :k]                 # (W, K) the draft equals the real token (never where unknown)
    accepted = accepted_prefix(drafts, real)   # (W,) the engine's greedy accept rule, at every anchor

    stats, steps, visited = AcceptanceStats(k), [], []
    stops = [i + 1 for i, t in enumerate(reply_ids[:budget]) if t in set(eos)]
    end = min([budget] + stops)                # the engine's reply length
    produced, pos = 1, 0                       # the prefill produced x_{first+1}; anchor index 0 = first
    while produced < end:
        if not bool(known[pos].all()):
            raise ValueError("the reply is too short to check this step's drafts")
        nacc = int(accepted[pos])
        stats.record(nacc)
        steps.append(nacc)
        visited.append(pos)
        produced += nacc + 1
        pos += nacc + 1
    reply = full[len(prompt_ids): len(prompt_ids) + end]
    vocab = set(draft_ids.cpu().tolist())
    vis = torch.tensor(visited, dtype=torch.long)
    scored = known[: end - 1]                   # anchors whose first draft lies inside the reply
    return Replay(k, stats, [steps],
                  (ok[: end - 1] & scored).sum(0), scored.sum(0),
                  (ok[vis] & known[vis]).sum(0), known[vis].sum(0),
                  sum(int(t) in vocab for t in reply.tolist()), reply.numel())


def greedy_replies(target, prompts: list[list[int]], *, k: int, max_new_tokens: int,
                   progress: bool = False) -> list[list[int]]:
    """The target's greedy reply to each prompt, ``k + 1`` tokens past ``max_new_tokens`` and past EOS: what
    :func:`replay_acceptance` needs to check every step's drafts (it stops at EOS as the engine does)."""
    from tqdm.auto import tqdm

    from ..engines.teaching import generate

    return [generate(target, list(ids), method="ar", max_new_tokens=max_new_tokens + k + 1, stop_at_eos=False).tokens
            for ids in tqdm(prompts, desc="greedy replies", disable=not progress)]


def replay_prompts(target, drafter: Eagle3Drafter, prompts: list[list[int]], replies: list[list[int]], *,
                   method: str, k: int, max_new_tokens: int) -> tuple[Replay, list[list[int]]]:
    """One drafter's acceptance over a prompt set at T=0, replayed: the :class:`Replay` of all prompts
    pooled, and ``[drafts, accepted]`` per prompt. Stops at the target's EOS as the engine does."""
    eos = tuple(target.eos_token_ids)
    total, per_prompt = None, []
    for ids, reply in zip(prompts, replies):
        rep = replay_acceptance(target, drafter, ids, reply, method=method, k=k, max_new_tokens=max_new_tokens, eos=eos)
        per_prompt.append([rep.stats.num_drafts, rep.stats.num_accepted_tokens])
        total = rep if total is None else total.merge(rep)
    return total, per_prompt


def evaluate_drafters(target, drafters: dict[str, Eagle3Drafter], prompts: list[list[int]], replies: list[list[int]], *,
                      k: int, max_new_tokens: int, categories: list[str | None] | None = None) -> dict[str, dict]:
    """AL and acceptance per position of each drafter on the same greedy replies (T=0), replayed: the
    engine's numbers step for step, at a fraction of its time. Each drafter drafts as its checkpoint says
    (parallel if it has a mask token, else sequentially).

    Per drafter: ``acceptance_length``, ``acceptance_per_position`` (vLLM's definitions), ``steps``,
    agreement with the real next token per depth over every reply position and over the positions where
    a step started, ``draft_vocab_coverage`` of the replies, ``drafts_accepted_per_prompt`` and, when
    ``categories`` (one per prompt) names any, ``acceptance_length_by_category``.
    """
    if len(prompts) != len(replies) or (categories is not None and len(categories) != len(prompts)):
        raise ValueError("evaluate_drafters needs one reply (and one category, if given) per prompt")
    if not prompts:
        raise ValueError("evaluate_drafters needs at least one prompt")
    if k < 1 or max_new_tokens < 1:
        raise ValueError(f"k and max_new_tokens must be >= 1 (got k={k}, max_new_tokens={max_new_tokens})")
    for drafter in drafters.values():                       # refuse what the engine would refuse, before any work
        check_compatible(drafter, target, k if drafter.cfg.parallel_drafting else None)
    results = {}
    for name, drafter in drafters.items():
        method = drafting_method(drafter)
        total, per_prompt = replay_prompts(target, drafter, prompts, replies, method=method, k=k,
                                           max_new_tokens=max_new_tokens)
        row = {"method": method, "acceptance_length": round(total.stats.acceptance_length, 4),
               "acceptance_per_position": [round(x, 4) for x in total.stats.per_position],
               "steps": total.stats.num_drafts,
               "agreement_all_positions": [round(x, 4) for x in total.agreement_all()],
               "agreement_visited_positions": [round(x, 4) for x in total.agreement_visited()],
               "draft_vocab_coverage": round(total.coverage, 4),
               "drafts_accepted_per_prompt": per_prompt}
        if categories is not None and any(c is not None for c in categories):
            row["acceptance_length_by_category"] = al_by_category(per_prompt, categories)
        results[name] = row
    return results


def al_by_category(per_prompt: list[list[int]], categories: list[str | None]) -> dict[str, float]:
    """AL per category (first-seen order) from ``[drafts, accepted]`` per prompt: 1 + accepted / drafts, pooled."""
    sums: dict[str, list[int]] = {}
    for (drafts, accepted), cat in zip(per_prompt, categories):
        if cat is not None:
            acc = sums.setdefault(cat, [0, 0])
            acc[0] += drafts
            acc[1] += accepted
    return {cat: round(1 + a / max(1, d), 4) for cat, (d, a) in sums.items()}
