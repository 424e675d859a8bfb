"""live_steering: steer a running AI agent at its next request boundary, with honest receipts.

Hosts submit ``Input("steer", text, id=...)`` through ``runtime.capability["submit"]``
and get a ``Receipt`` whose ``disposition`` says what happened: ``queued``,
``applied``, ``held`` or ``unknown``. Agent loops open a generation and call its
``boundary()`` before each model request. See docs/ for the full story.

The names below are imported on first use (PEP 562): ``import live_steering`` alone
loads nothing else, so the ``live-steering hook`` command, which a vendor's agent
runs at every hook moment, never pays for the runtime (anyio, attrs) it does not use.
``from live_steering import LiveRuntime`` works as usual.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._errors import (
        CheckpointDecisionWarning,
        GenerationClosedError,
        GenerationStateError,
        GenerationStopped,
        InvariantError,
        LiveSteeringError,
        RuntimeClosedError,
        UnknownInputError,
    )
    from ._events import Subscription
    from ._runtime import Generation, LiveRuntime, RuntimeStatistics, WriteBarrier, Writer
    from ._types import Disposition, HoldReason, Input, Receipt, RefusalReason, StopReason

__version__ = "0.1.0"

__all__ = [
    # host-facing values (pinned: docs/rules.md, C1-C4)
    "Input",
    "Receipt",
    "Disposition",
    "RefusalReason",
    "HoldReason",
    "StopReason",
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
    # the stop signal and the loop author's warning (issue 11)
    "GenerationStopped",
    "CheckpointDecisionWarning",
    # a host waiting for an input that was never accepted (issue 11, hosts)
    "UnknownInputError",
]

#: Where each public name lives.
_HOME = {
    "Input": "._types",
    "Receipt": "._types",
    "Disposition": "._types",
    "RefusalReason": "._types",
    "HoldReason": "._types",
    "StopReason": "._types",
    "LiveRuntime": "._runtime",
    "Generation": "._runtime",
    "Writer": "._runtime",
    "WriteBarrier": "._runtime",
    "RuntimeStatistics": "._runtime",
    "Subscription": "._events",
    "LiveSteeringError": "._errors",
    "GenerationStateError": "._errors",
    "GenerationClosedError": "._errors",
    "RuntimeClosedError": "._errors",
    "InvariantError": "._errors",
    "GenerationStopped": "._errors",
    "CheckpointDecisionWarning": "._errors",
    "UnknownInputError": "._errors",
}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'live_steering' has no attribute {name!r}")
    # __import__ rather than importlib: the console script's import of this package stays free
    module = __import__(__name__ + home, fromlist=[name])
    value = getattr(module, name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
