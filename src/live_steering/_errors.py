"""The library's exceptions.

Expected refusals are never exceptions: they are receipts with ``accepted=False``
(CONTRACT.md C6). Exceptions here mean a *programming* error by the caller (a
boundary after the end of a generation, two generations at once) or a broken
internal invariant, which is a bug in this library.
"""

from __future__ import annotations

__all__ = [
    "GenerationClosedError",
    "GenerationStateError",
    "InvariantError",
    "LiveSteeringError",
    "RuntimeClosedError",
]


class LiveSteeringError(Exception):
    """Root of every exception this library raises on purpose."""


class GenerationStateError(LiveSteeringError, RuntimeError):
    """The engine-side API was used out of order.

    Examples: opening a second generation while one runs, running two boundaries
    of one generation at once, calling ``continue_after_checkpoint`` after the
    generation ended. The state of the runtime is unchanged when this is raised.
    """


class GenerationClosedError(GenerationStateError):
    """The generation no longer accepts work (it was stopped, or it finished)."""


class RuntimeClosedError(GenerationStateError):
    """The runtime was closed with ``aclose()``; it starts no new generation."""


class InvariantError(LiveSteeringError, AssertionError):
    """An internal invariant does not hold: a bug in live_steering, please report it."""
