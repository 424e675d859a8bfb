# examples/otel_spans.py
"""Steering in your traces: each steer's admission on the host's span, its delivery on the run's."""

import sys
from collections.abc import Mapping
from typing import Any

import anyio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from live_steering import Input, LiveRuntime
from live_steering.otel import instrument


async def write(steer: Input, metadata: Mapping[str, Any]) -> None:
    pass  # the engine's context store


async def main() -> None:
    # Your application's tracing set-up; an in-memory exporter here, OTLP or logfire in production.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("my-agent")

    runtime = LiveRuntime(session_id="session-7")
    instrument(runtime)  # the one line: every steer's fate becomes span events
    with tracer.start_as_current_span("agent.run"):
        async with runtime.open_generation("gen-1") as gen:
            with tracer.start_as_current_span("host.request"):  # a web request, say
                await runtime.submit_steering(Input("steer", "Use the v2 API", id="fix-1"), gen.id)
            await gen.boundary(write)  # before the next model request
            gen.continue_after_checkpoint()

    for span in exporter.get_finished_spans():
        for event in span.events:
            attributes = event.attributes or {}
            print(f"{span.name:13} {event.name:33} {attributes['live_steering.input.id']!s}")
    names = {span.name: [event.name for event in span.events] for span in exporter.get_finished_spans()}
    assert names["host.request"] == ["live_steering.steering.accepted"]
    assert names["agent.run"] == ["live_steering.steering.applied"]


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
