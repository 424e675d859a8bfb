"""The public surface: ``live_steering.__all__`` is exactly what hosts may import (STYLE.md)."""

from __future__ import annotations

import importlib

import pytest

import live_steering

EXPECTED_EXPORTS = {
    "Input",
    "Receipt",
    "Disposition",
    "RefusalReason",
    "HoldReason",
    "LiveRuntime",
    "Generation",
    "Writer",
    "WriteBarrier",
    "RuntimeStatistics",
    "Subscription",
    "LiveSteeringError",
    "GenerationStateError",
    "GenerationClosedError",
    "RuntimeClosedError",
    "InvariantError",
    "StopReason",
    "GenerationStopped",
    "CheckpointDecisionWarning",
    "UnknownInputError",
}


def test_all_is_exactly_the_public_surface() -> None:
    """The export set is pinned: adding or removing a public name is a deliberate change."""
    assert set(live_steering.__all__) == EXPECTED_EXPORTS
    assert len(live_steering.__all__) == len(set(live_steering.__all__)), "duplicate in __all__"


@pytest.mark.parametrize("name", sorted(EXPECTED_EXPORTS))
def test_each_export_is_importable(name: str) -> None:
    """Every name in ``__all__`` resolves with ``from live_steering import name``."""
    module = importlib.import_module("live_steering")
    assert getattr(module, name) is not None
    namespace: dict[str, object] = {}
    exec(f"from live_steering import {name}", namespace)
    assert namespace[name] is getattr(module, name)


def test_star_import_gives_exactly_all() -> None:
    """``from live_steering import *`` binds exactly the names in ``__all__``."""
    namespace: dict[str, object] = {}
    exec("from live_steering import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == EXPECTED_EXPORTS


def test_errors_share_the_root_and_their_builtin_bases() -> None:
    """Every library error is a LiveSteeringError and subclasses the builtin whose meaning it shares."""
    for name in ("GenerationStateError", "GenerationClosedError", "RuntimeClosedError", "InvariantError"):
        assert issubclass(getattr(live_steering, name), live_steering.LiveSteeringError)
    assert issubclass(live_steering.InvariantError, AssertionError)
    assert issubclass(live_steering.GenerationStateError, RuntimeError)
