"""How much room each figure leaves under its target, and ``--margin``: a run that passes only
with that much room (docs/performance.md, "Room under a target").

A figure that sits right on its target passes one run and fails the next on a shared machine,
so a pass says little. ``room`` says how far it is from failing, as a fraction of what the
target allows:

- a figure bounded from above (most of them): ``(target - measured) / target``;
- a figure bounded from below (``throughput``, ``decisions_per_commit``):
  ``(measured - target) / target``;
- an overhead figure (``integration_overhead_*``, whose floor is the same framework run without
  live_steering): what the target allows is the overhead, ``target - 1``, so the room is
  ``(target - measured) / (target - 1)``. Read as a fraction of the target itself, 10% of
  room under 1.05 would ask for a ratio of 0.945: the steered run faster than the bare one.

``measured`` is the ratio where there is a floor, else the value (bytes, seconds, a rate).
A figure with no target (reported only) has no room and is never failed by ``--margin``.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._timing import Figure

__all__ = ["HIGHER", "OVERHEAD_PREFIX", "apply_margin", "room"]

#: Figures whose floor is the same run without live_steering: their target is an overhead budget.
OVERHEAD_PREFIX = "integration_overhead_"
#: Figures bounded from below: more is better.
HIGHER = frozenset({"throughput", "decisions_per_commit"})


def room(fig: Figure) -> float | None:
    """The figure's room under its target as a fraction (negative: it misses), or ``None``."""
    target = fig.get("target")
    if target is None:
        return None
    measured = fig["ratio"] if fig.get("ratio") is not None else fig["value"]
    if fig["name"] in HIGHER:
        return float((measured - target) / target)
    if fig["name"].startswith(OVERHEAD_PREFIX) and target > 1:
        return float((target - measured) / (target - 1))
    return float((target - measured) / target)


def apply_margin(figures: Iterable[Figure], margin: float) -> None:
    """Add each figure's ``room`` (rounded to 3 places) and, when ``margin`` > 0, make ``ok``
    false for a figure with less room than ``margin``. The checks use the rounded room, the
    one printed, so a printed row always agrees with its ``ok``."""
    for fig in figures:
        value = room(fig)
        fig["room"] = None if value is None else round(value, 3)
        if margin > 0 and fig["room"] is not None and fig["room"] < margin:
            fig["ok"] = False
