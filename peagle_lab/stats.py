"""Acceptance statistics with vLLM's definitions.

* per-position acceptance ``a_i = accepted at draft position i / number of drafts`` (K floats,
  index 0 = the first draft token);
* acceptance length ``AL = 1 + accepted tokens / drafts`` (the target's own token each step counts as 1);
* conditional acceptance ``accepted at i / accepted at i-1`` (position 0: over drafts).

vLLM exposes the same counters in Prometheus as ``vllm:spec_decode_num_drafts``,
``..._num_draft_tokens``, ``..._num_accepted_tokens`` and ``..._num_accepted_tokens_per_pos``.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AcceptanceStats:
    k: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def __post_init__(self):
        if not self.accepted_per_pos:
            self.accepted_per_pos = [0] * self.k

    def record(self, n_accepted: int) -> None:
        """One speculative step of K drafts of which the first ``n_accepted`` were accepted."""
        if not 0 <= n_accepted <= self.k:
            raise ValueError(f"accepted {n_accepted} of {self.k} drafts")
        self.num_drafts += 1
        self.num_draft_tokens += self.k
        self.num_accepted_tokens += n_accepted
        for i in range(n_accepted):
            self.accepted_per_pos[i] += 1

    def merge(self, other: "AcceptanceStats") -> "AcceptanceStats":
        if other.k != self.k:
            raise ValueError(f"cannot merge stats for K={self.k} and K={other.k}")
        return AcceptanceStats(self.k, self.num_drafts + other.num_drafts,
                               self.num_draft_tokens + other.num_draft_tokens,
                               self.num_accepted_tokens + other.num_accepted_tokens,
                               [a + b for a, b in zip(self.accepted_per_pos, other.accepted_per_pos)])

    @property
    def acceptance_length(self) -> float:
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else float("nan")

    @property
    def per_position(self) -> list[float]:
        return [a / self.num_drafts if self.num_drafts else 0.0 for a in self.accepted_per_pos]

    @property
    def conditional(self) -> list[float]:
        out, prev = [], self.num_drafts
        for a in self.accepted_per_pos:
            out.append(a / prev if prev else 0.0)
            prev = a
        return out

    def to_dict(self) -> dict:
        return {"k": self.k, "num_drafts": self.num_drafts, "num_draft_tokens": self.num_draft_tokens,
                "num_accepted_tokens": self.num_accepted_tokens, "accepted_per_pos": list(self.accepted_per_pos),
                "acceptance_length": self.acceptance_length, "acceptance_per_position": self.per_position,
                "conditional_acceptance": self.conditional}
