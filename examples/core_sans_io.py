# examples/core_sans_io.py
"""Test recipe: drive the sans-IO core with plain calls, no event loop, checking invariants."""

from live_steering import Disposition, Input
from live_steering._core import SteeringCore


def test_core_without_an_event_loop() -> None:
    events: list[dict[str, object]] = []
    core = SteeringCore(session_id="s", sink=events.append, clock=lambda: 0.0, identity_limit=1)
    gen = core.start_generation("g1")
    assert core.submit(Input("steer", "go left", id="a"), "g1").disposition is Disposition.QUEUED
    assert core.submit(Input("steer", "go right", id="b"), "g1").reason == "capacity"
    core.begin_boundary(gen)
    record = core.next_write(gen)
    assert record is not None
    core.confirm_write(gen, record)
    core.end_boundary(gen)
    core._check()  # raises InvariantError if any invariant of the core is broken
    assert [e["type"] for e in events] == [
        "generation.started",
        "steering.accepted",
        "steering.refused",
        "input.delivered",
        "steering.applied",
    ]


if __name__ == "__main__":
    test_core_without_an_event_loop()  # no backend: the core never awaits
