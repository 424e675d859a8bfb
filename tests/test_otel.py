"""``live_steering.otel.instrument``: each input's admission, delivery and final disposition as
span events on the span current where it happened, checked with the SDK's in-memory exporter."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from live_steering import Input, LiveRuntime
from live_steering.otel import EVENT_NAMES, instrument

pytestmark = pytest.mark.anyio


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> Tracer:
    # A provider of the test's own: the global one is set once per process and is not ours to take.
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test")


async def _writer(input: Input, metadata: Mapping[str, Any]) -> None:
    await anyio.lowlevel.checkpoint()


def _events(exporter: InMemorySpanExporter) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    spans: tuple[ReadableSpan, ...] = exporter.get_finished_spans()
    return {span.name: [(e.name, dict(e.attributes or {})) for e in span.events] for span in spans}


async def test_admission_lands_on_the_host_span_and_delivery_on_the_loop_span(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    runtime = LiveRuntime(session_id="s-1")
    instrument(runtime)
    with tracer.start_as_current_span("agent.run"):
        async with runtime.open_generation("gen-1") as gen:
            with tracer.start_as_current_span("host.submit"):
                accepted = await runtime.submit_steering(Input("steer", "use the v2 API", id="fix-1"), gen.id)
                repeat = await runtime.submit_steering(Input("steer", "use the v2 API", id="fix-1"), gen.id)
                refused = await runtime.submit_steering(Input("steer", "   ", id="blank"), gen.id)
            await gen.boundary(_writer)
            await runtime.submit_steering(Input("steer", "too late", id="fix-2"), gen.id)
            gen.stop()
    assert (accepted.accepted, repeat.accepted, refused.accepted) == (True, True, False)
    events = _events(exporter)
    assert events["host.submit"] == [
        (
            "live_steering.steering.accepted",
            {
                "live_steering.input.id": "fix-1",
                "live_steering.generation.id": "gen-1",
                "live_steering.disposition": "queued",
                "live_steering.session.id": "s-1",
                "live_steering.event.sequence": 2,
            },
        ),
        (
            "live_steering.steering.repeated",
            {
                "live_steering.input.id": "fix-1",
                "live_steering.generation.id": "gen-1",
                "live_steering.disposition": "queued",
                "live_steering.session.id": "s-1",
                "live_steering.event.sequence": 3,
            },
        ),
        (
            "live_steering.steering.refused",
            {
                "live_steering.input.id": "blank",
                "live_steering.generation.id": "gen-1",
                "live_steering.reason": "invalid-input",
                "live_steering.session.id": "s-1",
                "live_steering.event.sequence": 4,
            },
        ),
    ]
    run = [
        (name, attributes.get("live_steering.input.id"), attributes.get("live_steering.disposition"))
        for name, attributes in events["agent.run"]
    ]
    assert run == [
        ("live_steering.steering.applied", "fix-1", "applied"),
        ("live_steering.steering.accepted", "fix-2", "queued"),
        ("live_steering.steering.held", "fix-2", "held"),
    ]
    applied = dict(events["agent.run"][0][1])
    assert applied["live_steering.delivery"] == "request_boundary"
    held = dict(events["agent.run"][2][1])
    assert held["live_steering.reason"] == "generation-stopped"


async def test_no_text_is_recorded(tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    """Span attributes carry ids and outcomes, never what the person typed."""
    runtime = LiveRuntime()
    instrument(runtime)
    secret = "the password is hunter2"
    with tracer.start_as_current_span("run"):
        async with runtime.open_generation() as gen:
            await runtime.submit_steering(Input("steer", secret, id="s"), gen.id)
            await gen.boundary(_writer)
            gen.stop()
    recorded = repr(_events(exporter))
    assert "hunter2" not in recorded
    assert "live_steering.steering.applied" in recorded


async def test_twice_records_once_and_the_undo_stops_recording(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    runtime = LiveRuntime()
    undo = instrument(runtime)
    assert instrument(runtime) is undo
    with tracer.start_as_current_span("first"):
        async with runtime.open_generation() as gen:
            await runtime.submit_steering(Input("steer", "one", id="a"), gen.id)
            undo()
            undo()  # idempotent
            await runtime.submit_steering(Input("steer", "two", id="b"), gen.id)
            gen.stop()
    assert [name for name, _ in _events(exporter)["first"]] == ["live_steering.steering.accepted"]
    again = instrument(runtime)
    assert again is not undo  # instrumenting again after the undo is a new hook
    undo()  # the old undo, called once more, leaves the new instrumentation alone
    with tracer.start_as_current_span("again"):
        async with runtime.open_generation() as gen:
            await runtime.submit_steering(Input("steer", "three", id="c"), gen.id)
            gen.stop()
    assert [name for name, _ in _events(exporter)["again"]][:1] == ["live_steering.steering.accepted"]
    again()


async def test_an_instrumented_runtime_is_collected_once_its_session_is_over() -> None:
    """One runtime per session, each instrumented and closed: none is kept alive by being
    instrumented (the host never calls the undo), and the undo of a collected one does nothing."""
    refs: list[weakref.ref[LiveRuntime]] = []
    undos = []
    for n in range(3):
        async with LiveRuntime(session_id=f"s{n}") as runtime:
            undos.append(instrument(runtime))
            async with runtime.open_generation() as gen:
                await runtime.submit_steering(Input("steer", "one", id="a"), gen.id)
                gen.stop()
        refs.append(weakref.ref(runtime))
    del runtime, gen
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]
    undos[0]()  # its runtime is gone: nothing to remove from, nothing raised


async def test_follow_ups_and_skipped_tools_are_recorded(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    runtime = LiveRuntime()
    instrument(runtime)
    with tracer.start_as_current_span("run"):
        async with runtime.open_generation("gen-a") as gen:
            await runtime.submit_steering(Input("follow_up", "then write the tests", id="next"), gen.id)
            await runtime.submit_steering(Input("steer", "stop using tool b", id="steer"), gen.id)
            gen.skip_tools(["call-2", "call-3"])
            await gen.boundary(_writer)
        async with runtime.open_generation("gen-b") as gen:
            await gen.boundary(_writer)
    events = _events(exporter)["run"]
    skipped = [attributes for name, attributes in events if name == "live_steering.tools.skipped"]
    assert skipped == [
        {
            "live_steering.generation.id": "gen-a",
            "live_steering.tool_call.ids": ("call-2", "call-3"),
            "live_steering.input.ids": ("steer",),
            "live_steering.session.id": runtime.session_id,
            "live_steering.event.sequence": skipped[0]["live_steering.event.sequence"],
        }
    ]
    follow_up = [
        attributes
        for name, attributes in events
        if name == "live_steering.steering.applied" and attributes["live_steering.input.id"] == "next"
    ]
    assert len(follow_up) == 1
    assert follow_up[0]["live_steering.delivery"] == "follow_up"
    assert follow_up[0]["live_steering.generation.id"] == "gen-b"


async def test_without_a_recording_span_nothing_fails() -> None:
    """No SDK configured, no current span: the runtime runs as without instrumentation."""
    runtime = LiveRuntime()
    instrument(runtime)
    async with runtime.open_generation() as gen:
        receipt = await runtime.submit_steering(Input("steer", "x", id="a"), gen.id)
        await gen.boundary(_writer)
    assert receipt.accepted
    assert runtime.statistics().listener_errors == 0


def test_only_a_runtime_can_be_instrumented() -> None:
    with pytest.raises(TypeError, match="LiveRuntime"):
        instrument(object())  # type: ignore[arg-type]


def test_every_recorded_type_is_a_documented_event_type() -> None:
    import re
    from pathlib import Path

    events_page = (Path(__file__).resolve().parent.parent / "docs" / "events.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z]+\.[a-z_]+)` \|", events_page, flags=re.MULTILINE))
    assert set(EVENT_NAMES) <= documented
    assert {name.removeprefix("live_steering.") for name in EVENT_NAMES.values()} == set(EVENT_NAMES)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # pydantic-ai runs on asyncio only
async def test_pydantic_ai_instrumentation_carries_admission_on_the_tool_span_and_delivery_on_chat(
    anyio_backend: str,
) -> None:
    """pydantic-ai's own OpenTelemetry instrumentation (what logfire turns on): a steer submitted
    from inside a tool lands ``steering.accepted`` on that tool's ``execute_tool`` span, and its
    write at the next request boundary lands ``input.delivered`` and ``steering.applied`` on the
    ``chat`` span of the model request that carries it (docs/otel.md)."""
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    from live_steering.integrations.pydantic_ai import LiveSteering

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    replies = [
        ModelResponse(parts=[ToolCallPart("run_tests", {})]),
        ModelResponse(parts=[TextPart("Fixed.")]),
    ]
    seen: list[list[ModelMessage]] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return replies[len(seen) - 1]

    runtime = LiveRuntime(session_id="s-pai")
    instrument(runtime)
    agent = Agent(
        FunctionModel(model),
        capabilities=[
            Instrumentation(settings=InstrumentationSettings(tracer_provider=provider)),
            LiveSteering(runtime),
        ],
    )
    receipts = []

    @agent.tool_plain
    async def run_tests() -> str:
        """Run the test suite."""
        generation = runtime.generation
        assert generation is not None
        receipts.append(
            await runtime.submit_steering(Input("steer", "use the v2 API", id="fix-1"), generation["id"])
        )
        return "1 failed"

    await agent.run("Make the suite pass")
    provider.shutdown()
    assert [r.disposition for r in receipts] == ["queued"]
    spans = exporter.get_finished_spans()
    by_span = [(span.name, [e.name for e in span.events]) for span in spans]
    assert by_span == [
        ("chat function:model:", []),
        ("execute_tool run_tests", [EVENT_NAMES["steering.accepted"]]),
        ("chat function:model:", [EVENT_NAMES["steering.applied"]]),  # the request that carries it
        ("invoke_agent agent", []),
    ]
    applied = spans[2].events[0]
    assert "fix-1" in dict(applied.attributes or {}).values()
    assert "use the v2 API" in str(seen[1])
