"""Timing and figure-building helpers shared by the suite.

Every ``"ns"`` figure is a ratio against a floor measured in the same process,
in the same run, interleaved with it: one *round* times one batch of every floor
and every figure, in a shuffled order, and the reported value is the median of
the per-operation cost over all rounds. Medians over batches make a slow batch
(preemption on a shared machine, a page fault) irrelevant; interleaving keeps a
drift of the machine's speed from favouring either side of a ratio.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from time import perf_counter_ns
from typing import Any, Literal

__all__ = ["Figure", "Samples", "figure", "no_gc", "perf_counter_ns"]

Figure = dict[str, Any]
Unit = Literal["ns", "bytes"]


class Samples:
    """Per-operation costs in ns of each measurement, one entry per batch (round)."""

    def __init__(self) -> None:
        self._by_name: dict[str, list[float]] = {}

    def add(self, name: str, per_op_ns: float) -> None:
        self._by_name.setdefault(name, []).append(per_op_ns)

    def median(self, name: str) -> float:
        return statistics.median(self._by_name[name])

    def count(self, name: str) -> int:
        return len(self._by_name.get(name, ()))

    def names(self) -> list[str]:
        return list(self._by_name)


@contextmanager
def no_gc() -> Iterator[None]:
    """Keep the cyclic garbage collector out of a timed batch (as ``timeit`` does).

    A collection runs whenever enough objects were allocated, in whichever batch
    happens to cross the threshold; it is noise to a per-operation figure. The
    suite collects between batches instead.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def figure(name: str, backend: str, unit: Unit, value: float, floor: float, target: float) -> Figure:
    """One figure of the JSON output.

    For ``"ns"`` the ratio is ``value / floor``; for ``"bytes"`` the floor is the
    size of an empty ``dict`` and the ratio is the value itself, so that the
    target is a byte budget. ``ok`` is ``ratio <= target``.
    """
    # Round first and derive the ratio from the rounded numbers, so that the
    # printed fields obey ``ratio == value / floor`` and ``ok == ratio <= target`` exactly.
    value, floor = round(value, 1), round(floor, 1)
    if unit == "ns":
        ratio = value / floor
    elif unit == "bytes":
        ratio = value
    else:  # pragma: no cover - guarded by the Literal type
        raise ValueError(f"unknown unit {unit!r}")
    return {
        "name": name,
        "backend": backend,
        "unit": unit,
        "value": value,
        "floor": floor,
        "ratio": ratio,
        "target": target,
        "ok": ratio <= target,
    }
