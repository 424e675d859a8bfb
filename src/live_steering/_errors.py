"""The library's exceptions.

Expected refusals are never exceptions: they are receipts with ``accepted=False``
(rule C6, docs/rules.md). Exceptions here mean a *programming* error by the caller (a
boundary after the end of a generation, two generations at once) or a broken
internal invariant, which is a bug in this library.
"""

from __future__ import annotations

__all__ = [
    "CheckpointDecisionWarning",
    "GenerationClosedError",
    "GenerationStateError",
    "GenerationStopped",
    "InvariantError",
    "LiveSteeringError",
    "RuntimeClosedError",
    "UnknownInputError",
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


class GenerationStopped(LiveSteeringError):
    """The stop signal: the generation was stopped, so the loop should end now.

    Raised by ``Generation.boundary()`` once a stop (``Generation.stop``, from the
    engine's own task, another task or a host) has closed admission; leaving the
    generation's block absorbs it and publishes ``generation.stopped``. Like
    ``trio.EndOfChannel``, it is an ordinary end of the loop, not a misuse: it is
    not a ``GenerationStateError``. ``generation_id`` names the generation and
    ``reason`` is the ``StopReason`` value it was stopped with (a ``str``).
    """

    _origin: object = None
    """The generation it was raised for (set by the core): only its block absorbs it."""

    def __init__(self, generation_id: str, reason: str) -> None:
        super().__init__(f"generation {generation_id!r} was stopped ({reason})")
        self.generation_id = generation_id
        self.reason = reason


class UnknownInputError(LiveSteeringError, LookupError):
    """``LiveRuntime.wait_final`` was given an input id the runtime never accepted.

    Such an input can never become final, so waiting for it would never end. A
    refused submit leaves no identity either (C6).
    """


class InvariantError(LiveSteeringError, AssertionError):
    """An internal invariant does not hold: a bug in live_steering, please report it."""


class CheckpointDecisionWarning(UserWarning):
    """A generation's block was left normally with input pending and no after-checkpoint decision.

    The loop forgot ``gen.continue_after_checkpoint()`` after its checkpoint: the
    pending inputs are held (``generation-stopped``) rather than continued, and the
    terminal event carries ``"warning": "no-checkpoint-decision"``. Also when the
    decision was made (``continue_after_checkpoint()`` returned True) but the block
    was left before a boundary delivered the pending input: the terminal event then
    carries ``"warning": "left-after-continue"``. Turn it into an error in tests
    (``-W error::live_steering.CheckpointDecisionWarning``).
    """
