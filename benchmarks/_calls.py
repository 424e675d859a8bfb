"""``--calls``: the function calls one one-input boundary makes, counted, not timed.

A count is the same on an idle and a busy machine, so it tells where a boundary's time goes when
the timings are too noisy to: each Python frame costs about as much as the rest of a small
function's body. ``python -m benchmarks --calls`` prints them per backend;
``tests/test_benchmarks.py`` holds the count of Python frames to its budget.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Mapping
from types import FrameType
from typing import Any

import anyio

from live_steering import Input, LiveRuntime

__all__ = ["boundary_calls", "table"]

#: Where each kind of call is counted: a Python function by file and qualified name, a C one by name.
Call = tuple[str, str]


async def _write_nothing(input: Input, metadata: Mapping[str, Any]) -> None:
    """The context writer: does nothing, asynchronously (as the boundary figures' writer)."""


async def _count() -> collections.Counter[Call]:
    runtime = LiveRuntime()
    calls: collections.Counter[Call] = collections.Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            calls[(frame.f_code.co_filename.rsplit("/", 1)[-1], frame.f_code.co_qualname)] += 1
        elif event == "c_call":
            calls[("C", getattr(arg, "__qualname__", repr(arg)))] += 1

    async with runtime.open_generation() as gen:
        for n in range(5):  # warm: the writer checked, the parker's task state read
            runtime.submit_steering_nowait(Input("steer", "x", id=f"warm-{n}"), gen.id)
            await gen.boundary(_write_nothing)
        runtime.submit_steering_nowait(Input("steer", "x", id="counted"), gen.id)
        sys.setprofile(profile)
        try:
            await gen.boundary(_write_nothing)
        finally:
            sys.setprofile(None)
        gen.stop()
    calls.pop(("C", "setprofile"), None)
    return calls


def boundary_calls(backend: str) -> collections.Counter[Call]:
    """Every call one warm one-input ``gen.boundary()`` makes on ``backend``, by kind."""
    return anyio.run(_count, backend=backend)


def table(backends: tuple[str, ...]) -> str:
    lines = []
    for backend in backends:
        calls = boundary_calls(backend)
        python = sum(n for (where, _), n in calls.items() if where != "C")
        lines.append(f"{backend}: {python} Python frames, {sum(calls.values()) - python} C calls")
        for (where, name), n in sorted(calls.items(), key=lambda item: (item[0][0] == "C", item[0])):
            lines.append(f"  {n} x {name} ({where})")
    return "\n".join(lines)
