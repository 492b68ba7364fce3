"""Moved to :mod:`peagle_lab.evaluate` (evaluation is not a part of training); this name stays for
notebook 03, which imports ``replay_acceptance`` from here."""
from ..evaluate import Replay, replay_acceptance  # noqa: F401
