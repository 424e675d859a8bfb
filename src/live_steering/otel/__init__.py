"""``live_steering.otel``: steering in the traces you already have (extra ``otel``).

``instrument(runtime)`` records what happens to every input, as span events on whichever span is
current when it happens: the admission (``steering.accepted``, ``steering.repeated``,
``steering.refused``) on the span of the code that submitted, the delivery (``steering.applied``)
and a final ``held`` or ``unknown`` on the span of the loop that wrote or ended it, and a skipped
tool batch (``tools.skipped``) on the loop's span. A framework that traces its runs (pydantic-ai
through logfire, the OpenAI Agents SDK's tracing, a host's own spans) shows each steer where it
landed, with no span of ours in between.

Only ``opentelemetry-api`` is imported: the application chooses the SDK and the exporter. With no
span recording (no SDK configured, or no current span) the events go nowhere, as every
OpenTelemetry instrumentation behaves. The steer's text is never recorded: attributes carry ids,
the disposition, the reason and how it was delivered.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from .._runtime import LiveRuntime

__all__ = [
    "ATTRIBUTES",
    "EVENT_NAMES",
    "instrument",
]

#: The attribute each event field becomes, in OpenTelemetry's naming style (a namespace, then
#: dot-separated lowercase words). ``None`` fields are left out.
ATTRIBUTES: Final[Mapping[str, str]] = {
    "input_id": "live_steering.input.id",
    "target_generation_id": "live_steering.generation.id",
    "generation_id": "live_steering.generation.id",
    "disposition": "live_steering.disposition",
    "reason": "live_steering.reason",
    "delivery": "live_steering.delivery",
    "tool_call_ids": "live_steering.tool_call.ids",
    "input_ids": "live_steering.input.ids",
    "session_id": "live_steering.session.id",
    "sequence": "live_steering.event.sequence",
}

#: The runtime events recorded, and the span event name each becomes.
EVENT_NAMES: Final[Mapping[str, str]] = {
    "steering.accepted": "live_steering.steering.accepted",
    "steering.repeated": "live_steering.steering.repeated",
    "steering.refused": "live_steering.steering.refused",
    "steering.applied": "live_steering.steering.applied",
    "steering.held": "live_steering.steering.held",
    "steering.unknown": "live_steering.steering.unknown",
    "tools.skipped": "live_steering.tools.skipped",
}

#: The disposition an event leaves its input in, where the event itself does not say.
_DISPOSITION: Final[Mapping[str, str]] = {
    "steering.accepted": "queued",
    "steering.applied": "applied",
    "steering.held": "held",
    "steering.unknown": "unknown",
}

_instrumented: weakref.WeakKeyDictionary[LiveRuntime, Callable[[], None]] = weakref.WeakKeyDictionary()


def _attributes(event: Mapping[str, Any]) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {}
    for field, name in ATTRIBUTES.items():
        value = event.get(field)
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            attributes[name] = [str(item) for item in value]
        elif isinstance(value, (bool, int, float, str)):
            attributes[name] = value
        else:
            attributes[name] = str(value)
    disposition = _DISPOSITION.get(event["type"])
    if disposition is not None:
        attributes[ATTRIBUTES["disposition"]] = disposition
    return attributes


def _record(event: Mapping[str, Any]) -> None:
    name = EVENT_NAMES.get(event["type"])
    if name is None:
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.add_event(name, _attributes(event))


def instrument(runtime: LiveRuntime) -> Callable[[], None]:
    """Record ``runtime``'s steering as span events on the current span; return the undo.

    Instrumenting a runtime twice records once: the second call returns the first call's undo.
    The undo is idempotent. Events are recorded synchronously, in the step that published them
    (a runtime listener), so they land on the span that is current in that step.
    """
    if not isinstance(runtime, LiveRuntime):
        raise TypeError(f"instrument() takes a LiveRuntime, not {type(runtime).__name__}")
    existing = _instrumented.get(runtime)
    if existing is not None:
        return existing

    def record(event: Mapping[str, Any]) -> None:  # its own listener: its undo removes only it
        _record(event)

    remove = runtime.add_listener(record)
    undone = False
    # The table's value must not hold its key: a runtime referenced from its own entry would never
    # be collected, and a host that instruments one runtime per session would keep every one.
    held = weakref.ref(runtime)

    def uninstrument() -> None:
        nonlocal undone
        if undone:  # idempotent: an old undo called again leaves a later instrumentation alone
            return
        undone = True
        target = held()
        if target is not None and _instrumented.get(target) is uninstrument:
            del _instrumented[target]
        remove()

    _instrumented[runtime] = uninstrument
    return uninstrument
