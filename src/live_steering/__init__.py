"""live_steering: steer a running AI agent at its next request boundary, with honest receipts.

Hosts submit ``Input("steer", text, id=...)`` through ``runtime.capability["submit"]``
and get a ``Receipt`` whose ``disposition`` says what happened: ``queued``,
``applied``, ``held`` or ``unknown``. Agent loops open a generation and call its
``boundary()`` before each model request. See docs/ for the full story.
"""

from ._errors import (
    GenerationClosedError,
    GenerationStateError,
    InvariantError,
    LiveSteeringError,
    RuntimeClosedError,
)
from ._events import Subscription
from ._runtime import Generation, LiveRuntime, RuntimeStatistics, WriteBarrier, Writer
from ._types import Disposition, HoldReason, Input, Receipt, RefusalReason

__version__ = "0.1.0"

__all__ = [
    # host-facing values (pinned by CONTRACT.md)
    "Input",
    "Receipt",
    "Disposition",
    "RefusalReason",
    "HoldReason",
    # the runtime and the engine-side API
    "LiveRuntime",
    "Generation",
    "Writer",
    "WriteBarrier",
    "RuntimeStatistics",
    "Subscription",
    # errors
    "LiveSteeringError",
    "GenerationStateError",
    "GenerationClosedError",
    "RuntimeClosedError",
    "InvariantError",
]
