"""``live-steering demo``: the reference loop on a scripted provider, case by case.

Every case is a scripted race (gates, never sleeps), so the output is the same on
every run. The demo checks each outcome it narrates and exits 1 if one is off.
``--json`` prints only the runtime's event stream, one pinned event (C21) per line.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import anyio

from .._errors import LiveSteeringError
from .._runtime import LiveRuntime
from .._types import Disposition, Input, Receipt
from ..journal import JournalCorruptError, JournalError
from ..loop import AgentLoop, LoopResult, Reply, ToolCall
from ..testing import EventRecorder, RecordingContext, ScriptedProvider, ScriptedTools
from ._demo_receipts import journaled, long_run
from ._output import Progress, error, file_path, stdout_gone

__all__ = ["register", "run", "run_demo"]


class DemoError(LiveSteeringError, RuntimeError):
    """A demo case did not end as it says it does (a bug: please report it)."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the reference loop through the interesting cases",
        description="Drive the reference agent loop on a scripted provider through each steering case "
        "and print what happened and why.",
    )
    parser.add_argument(
        "--json", action="store_true", help="print only the event stream, one JSON event per line"
    )
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio", help="anyio backend")
    parser.add_argument(
        "--journal",
        metavar="PATH",
        type=file_path,
        help="journal the receipts in a SQLite file; print a receipt.durable line as each becomes durable",
    )
    parser.add_argument(
        "--steers",
        type=_positive,
        metavar="N",
        help="instead of the cases, submit N steers over many generations (a long run, for crash tests)",
    )
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="run an owner and a host in two processes on a temporary SQLite fleet store, with a takeover",
    )
    parser.set_defaults(handler=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


_PROG = "live-steering demo"

#: The options of the in-process demo that ``--fleet`` refuses rather than ignore (flag -> attribute).
_FLEET_REFUSES = {"--json": "json", "--steers": "steers", "--journal": "journal"}

#: A long run of at least this many steers shows its progress on stderr, when that is a terminal.
PROGRESS_FROM = 200


def run(args: argparse.Namespace) -> int:
    """The ``demo`` handler: 0 when every case ended as narrated; each error is one line on stderr."""
    steers: int | None = args.steers
    # a failing journal logs its error; here the one line below says it, so it is not said twice
    journal_log = logging.getLogger("live_steering.journal")
    if not any(isinstance(h, logging.NullHandler) for h in journal_log.handlers):
        journal_log.addHandler(logging.NullHandler())
    progress = sys.stderr if steers is not None and steers >= PROGRESS_FROM else None
    if args.backend == "trio" and not _trio_installed():
        error(_PROG, TRIO_MISSING)
        return 2
    if args.fleet:
        ignored = [
            flag for flag, given in _FLEET_REFUSES.items() if getattr(args, given) not in (None, False)
        ]
        if ignored:
            # the fleet demo is a narrated story of two processes on a temporary store: it has no
            # event stream to print, no long run, and its store is its journal (removed at the end)
            error(_PROG, f"--fleet takes no {' or '.join(ignored)} (it narrates one scripted takeover)")
            return 2
        from ._demo_fleet import FleetDemoError, run_fleet_demo

        try:
            anyio.run(run_fleet_demo, sys.stdout, args.backend, backend=args.backend)
        except FleetDemoError as exc:
            error(_PROG, exc)
            return 1
        return 0
    try:
        anyio.run(
            functools.partial(
                run_demo, sys.stdout, bool(args.json), journal=args.journal, steers=steers, progress=progress
            ),
            backend=args.backend,
        )
    except KeyboardInterrupt:
        error(_PROG, "interrupted")
        return 130
    except Exception as exc:
        found = _expected(exc)
        if found is None:
            raise  # a bug in the library or the demo: its traceback is what a report needs
        error(_PROG, found)
        return 2 if isinstance(found, JournalCorruptError) else 1
    return 0


#: What ``--backend trio`` says when trio is not installed (anyio's own error is a ``LookupError``).
TRIO_MISSING = (
    "--backend trio needs trio: pip install 'live-steering[trio]' "
    "(in a checkout: .venv/bin/pip install -e '.[trio]')"
)


def _trio_installed() -> bool:
    try:
        import trio  # noqa: F401
    except ImportError:
        return False
    return True


def _expected(exc: BaseException) -> BaseException | None:
    """The error a user can act on (a journal's, the disk's, a case's), out of a task group's wrapping."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, (JournalError, OSError, DemoError)) else None


def _tool(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, name, arguments)


_TOOLS = {"read_file": "def test_path(): assert load('old/a.py')", "run_tests": "1 failed, 11 passed"}


class _Out:
    """Lines to stdout. A reader gone (``| head``) ends the output quietly; the run carries on
    (its journal is not only its output). On a shared terminal, the progress line is cleared first."""

    def __init__(self, stream: TextIO, progress: Progress | None = None) -> None:
        self._stream: TextIO | None = stream
        self._progress = progress if progress is not None and stream.isatty() else None

    def __call__(self, text: str) -> None:
        if self._stream is None:
            return
        if self._progress is not None:
            self._progress.clear()
        try:
            print(text, file=self._stream, flush=True)
        except BrokenPipeError:
            self._stream = None
            stdout_gone()


class _Narrator:
    """Prints the human timeline: host actions, then each event as it happens, with why."""

    def __init__(self, out: _Out, enabled: bool) -> None:
        self._out = out
        self.enabled = enabled
        self.follow_ups: set[str] = set()
        """Ids the demo sent as follow-ups (the accepted event names no kind)."""

    def __call__(self, text: str = "") -> None:
        if self.enabled:
            self._out(text)

    def event(self, event: dict[str, Any]) -> None:
        if not self.enabled:
            return
        kind = event["type"]
        subject = event.get("input_id") or event.get("generation_id", "")
        detail = _EXPLAIN.get(kind, "")
        if subject in self.follow_ups and kind == "steering.accepted":
            detail = "queued for after this generation (a follow-up)"
        elif event.get("delivery") == "follow_up" and kind == "input.delivered":
            detail = "written as the next generation's request (a follow-up)"
        if "reason" in event:
            detail = f"{detail} ({event['reason']})" if detail else f"({event['reason']})"
        if kind.startswith("generation.") and kind != "generation.started" and kind != "generation.continued":
            detail += f" applied={event['input_ids']} not-applied={event['accepted_input_ids']}"
        if kind == "journal.failed":
            detail = event["error"]
        self(f"    #{event['sequence']:<3} {kind:<22} {subject:<14} {detail}")

    def durable(self, line: dict[str, Any]) -> None:
        """A ``receipt.durable`` line, in the timeline's own shape (no sequence: it is not an event)."""
        subject, disposition = line["input_id"], line["disposition"]
        self(f"    {'':<4} {'receipt.durable':<22} {subject:<14} {disposition} (committed to the journal)")

    def receipt(self, action: str, receipt: Receipt) -> None:
        what = receipt.disposition.value if receipt.disposition is not None else "refused"
        reason = f" ({receipt.reason})" if receipt.reason else ""
        self(f"  host: {action} -> {what}{reason}")


_EXPLAIN = {
    "generation.started": "admission opens",
    "generation.continued": "late steer: same generation runs again",
    "generation.finished": "",
    "generation.stopped": "",
    "generation.cancelled": "",
    "steering.accepted": "queued for the next request boundary",
    "steering.repeated": "same id, same content: current receipt, nothing admitted",
    "steering.refused": "refused before admission",
    "input.delivered": "written into the context at the boundary",
    "steering.applied": "applied (in the context; not proof the model obeyed)",
    "steering.held": "never written, never replayed",
    "steering.unknown": "write interrupted: effect cannot be established",
    "tools.skipped": "rest of the tool batch answered without running: a steer is pending",
}


class _JsonLines:
    """Writes each event (or ``receipt.durable`` line) as one JSON line."""

    def __init__(self, out: _Out) -> None:
        self._out = out

    def __call__(self, event: dict[str, Any]) -> None:
        self._out(json.dumps(event))


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise DemoError(message)


async def _run_loop(loop: AgentLoop, prompt: str, generation_id: str, results: list[LoopResult]) -> None:
    results.append(await loop.run(prompt, generation_id=generation_id))


async def _submit(runtime: LiveRuntime, say: _Narrator, text: str, input_id: str, gen_id: str) -> Receipt:
    receipt = await runtime.submit_steering(Input("steer", text, id=input_id), gen_id)
    say.receipt(f"steer {input_id!r} {text!r} anchored to {gen_id}", receipt)
    return receipt


async def _case_next_boundary(runtime: LiveRuntime, say: _Narrator) -> None:
    say("1. A steer sent while the model call is in flight lands at the next request boundary.")
    provider = ScriptedProvider(
        [Reply("Reading the test.", (_tool("c1", "read_file", path="tests/test_a.py"),)), "Fixed the path."]
    )
    loop = AgentLoop(runtime, provider, ScriptedTools(_TOOLS))
    in_flight = provider.gate(0)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_loop, loop, "Fix the failing test", "gen-1", results)
        await in_flight.wait_reached()
        say("  (model call 1 is in flight)")
        await _submit(runtime, say, "Use the corrected path src/a.py", "fix-path", "gen-1")
        in_flight.release()
    _expect(provider.texts_of(1, "steer") == ["Use the corrected path src/a.py"], "steer not in request 2")
    _expect(results[0].applied_input_ids == ("fix-path",), "fix-path not applied")
    say("  => the steer is in model request 2, once; request 1 could not have it.")


async def _case_burst(runtime: LiveRuntime, say: _Narrator) -> None:
    say("2. A burst of steers during a tool call: each arrives once, in order, at the next boundary.")
    provider = ScriptedProvider([Reply("Running the tests.", (_tool("c1", "run_tests"),)), "All green."])
    tools = ScriptedTools(_TOOLS)
    running = tools.gate("run_tests")
    loop = AgentLoop(runtime, provider, tools)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_loop, loop, "Make the suite pass", "gen-2", results)
        await running.wait_reached()
        say("  (tool run_tests is running; it is not interrupted)")
        for n, text in enumerate(["Skip the flaky test", "Then run lint", "Keep the diff small"], 1):
            await _submit(runtime, say, text, f"burst-{n}", "gen-2")
        running.release()
    steers = provider.texts_of(1, "steer")
    _expect(steers == ["Skip the flaky test", "Then run lint", "Keep the diff small"], f"burst: {steers}")
    say("  => all three are in model request 2, in admission order, each once.")


async def _case_late(runtime: LiveRuntime, say: _Narrator) -> None:
    say("3. A late steer during the final checkpoint continues the same generation.")
    saving = anyio.Event()
    go_on = anyio.Event()

    async def checkpoint(context: Any) -> None:
        saving.set()
        await go_on.wait()

    provider = ScriptedProvider(["Done.", "Done, and the changelog is updated."])
    loop = AgentLoop(runtime, provider, ScriptedTools(_TOOLS), checkpoint=checkpoint)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_loop, loop, "Bump the version", "gen-3", results)
        await saving.wait()
        say("  (the loop is saving its durable checkpoint)")
        await _submit(runtime, say, "Also update the changelog", "late-1", "gen-3")
        go_on.set()
    prompts = [e.text for e in provider.requests[1] if e.role == "user"]
    _expect(results[0].generation_id == "gen-3" and results[0].provider_calls == 2, "late: no continuation")
    _expect(prompts == ["Bump the version"], f"late: prompt replayed: {prompts}")
    say("  => one generation.started; the original prompt is in the context once, not replayed.")


async def _case_stop(runtime: LiveRuntime, say: _Narrator) -> None:
    say("4. A stop holds the pending steer: it is never written and starts no turn.")
    provider = ScriptedProvider(["Working on it."])
    loop = AgentLoop(runtime, provider, ScriptedTools(_TOOLS))
    in_flight = provider.gate(0)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_loop, loop, "Refactor the parser", "gen-4", results)
        await in_flight.wait_reached()
        await _submit(runtime, say, "Rename the module too", "stop-1", "gen-4")
        say("  host: stop the generation")
        loop.stop()
    receipt = runtime.receipt("stop-1")
    _expect(receipt is not None and receipt.disposition is Disposition.HELD, "stop: not held")
    _expect(results[0].outcome == "stopped", "stop: outcome")
    say("  => held (generation-stopped); a host wanting it again sends a new input with a new id.")


async def _case_unknown(runtime: LiveRuntime, say: _Narrator) -> None:
    say("5. A context write interrupted by cancellation is reported unknown, never held.")
    provider = ScriptedProvider([Reply("Reading.", (_tool("c1", "read_file", path="m.sql"),))], then="Done.")
    context = RecordingContext()
    loop = AgentLoop(runtime, provider, ScriptedTools(_TOOLS), context=context)
    in_flight = provider.gate(0)
    second_write = context.gate_write(1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_loop, loop, "Write the migration", "gen-5", [])
        await in_flight.wait_reached()
        for n in (1, 2, 3):
            await _submit(runtime, say, f"Migration note {n}", f"cut-{n}", "gen-5")
        provider.gate(1)  # hold the next model call too, if the loop ever got there
        in_flight.release()
        await second_write.wait_reached()
        say("  (the second write is in progress; the host cancels the generation)")
        tg.cancel_scope.cancel()
    states = [runtime.receipt(f"cut-{n}") for n in (1, 2, 3)]
    found = [None if r is None else r.disposition for r in states]
    _expect(found == [Disposition.APPLIED, Disposition.UNKNOWN, Disposition.HELD], f"cut: {found}")
    say("  => cut-1 applied, cut-2 unknown (write-interrupted), cut-3 held: it was never handed over.")


async def _case_repeat_and_stale(runtime: LiveRuntime, say: _Narrator) -> None:
    say("6. A repeated id gets its current receipt; changed content is a conflict.")
    again = await _submit(runtime, say, "Use the corrected path src/a.py", "fix-path", "gen-1")
    _expect(again.disposition is Disposition.APPLIED, "repeat: not the applied receipt")
    changed = await _submit(runtime, say, "Use another path", "fix-path", "gen-1")
    _expect(changed.reason == "identity-conflict", "repeat: conflict not refused")
    say("")
    say("7. A steer anchored to a generation that is not running is refused before admission.")
    stale = await _submit(runtime, say, "Try again", "stale-1", "gen-1")
    _expect(stale.reason == "stale-generation", "stale: not refused")
    _expect(runtime.receipt("stale-1") is None, "stale: an identity slot was used")


async def _case_follow_up_and_skip(runtime: LiveRuntime, say: _Narrator) -> None:
    say("8. A steer skips the rest of a tool batch; a follow-up runs as the next turn, no new prompt.")
    batch = Reply(
        "Reading the three modules.",
        (
            _tool("b1", "read_file", path="a.py"),
            _tool("b2", "read_file", path="b.py"),
            _tool("b3", "run_tests"),
        ),
    )
    provider = ScriptedProvider([batch, "Only a.py changed.", "Suite run: 12 passed."])
    tools = ScriptedTools(_TOOLS)
    first_read = tools.gate("read_file")
    loop = AgentLoop(runtime, provider, tools, skip_tools_on_steer=True)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_loop, loop, "Tidy the three modules", "gen-8", results)
        await first_read.wait_reached()
        say("  (the first of three tool calls runs)")
        await _submit(runtime, say, "Only touch a.py", "only-a", "gen-8")
        say.follow_ups.add("then-1")
        follow_up = await runtime.submit_steering(
            Input("follow_up", "Then run the suite", id="then-1"), "gen-8"
        )
        say.receipt("follow-up 'then-1' 'Then run the suite' anchored to gen-8", follow_up)
        first_read.release()
    (result,) = results
    _expect(result.skipped_tool_call_ids == ("b2", "b3"), f"skip: {result.skipped_tool_call_ids}")
    _expect(len(result.generation_ids) == 2, f"follow-up: generations {result.generation_ids}")
    _expect(provider.texts_of(2, "user")[-1:] == ["Then run the suite"], "follow-up: not the next request")
    receipt = runtime.receipt("then-1")
    _expect(receipt is not None and receipt.disposition is Disposition.APPLIED, "follow-up: not applied")
    say("  => b2 and b3 answered 'Skipped: ...' (every tool call keeps a result); only-a in request 2;")
    say("     then-1 written as the next generation's request; its receipt keeps its anchor, gen-8.")


_CASES: tuple[Callable[[LiveRuntime, _Narrator], Awaitable[None]], ...] = (
    _case_next_boundary,
    _case_burst,
    _case_late,
    _case_stop,
    _case_unknown,
    _case_repeat_and_stale,
    _case_follow_up_and_skip,
)


async def run_demo(
    out: TextIO,
    as_json: bool = False,
    *,
    journal: str | None = None,
    steers: int | None = None,
    progress: TextIO | None = None,
) -> LiveRuntime:
    """Run every case on one runtime, narrating to ``out``; returns the (closed) runtime.

    ``journal``: a receipt journal file to attach (``receipt.durable`` lines on ``out``).
    ``steers``: run the long run of that many steers instead of the cases.
    ``progress``: where a long run draws its progress line, when that is a terminal.
    """
    bar = None if progress is None or steers is None else Progress(progress, "long run: steers", steers)
    lines = _Out(out, bar)
    say = _Narrator(lines, enabled=not as_json)
    limit = max(2_000, steers or 0)  # a long run keeps every identity it submits
    # ids the runtime issues (a follow-up's generation) read the same on every run
    runtime = LiveRuntime(session_id="demo", identity_limit=limit, generation_prefix="gen-auto-")
    recorder = EventRecorder.attach(runtime)
    if as_json:
        runtime.add_listener(_JsonLines(lines))
    else:
        runtime.add_listener(say.event)
    try:
        async with contextlib.AsyncExitStack() as stack:
            if journal is not None:  # opened first: a journal that cannot open is the only output
                durable = _JsonLines(lines) if as_json else say.durable
                await stack.enter_async_context(journaled(runtime, journal, durable))
            say("live_steering demo: a reference agent loop on a scripted provider, steered while it runs.")
            say("Each line '#N type subject' is an event of the runtime's stream, as it happens.")
            say("")
            async with runtime:
                if steers is not None:
                    say(f"Long run: {steers} steers over many generations.")
                    await long_run(runtime, steers, say, None if bar is None else bar.update)
                    runtime._check()
                else:
                    for case in _CASES:
                        await case(runtime, say)
                        say("")
                        runtime._check()
    finally:
        if bar is not None:
            bar.done()
    stats = runtime.statistics()
    say(
        f"Summary: {stats.accepted} accepted, {stats.applied} applied, {stats.held} held, "
        f"{stats.unknown} unknown, {stats.repeated} repeated, {stats.refused} refused; "
        f"{recorder.count('generation.started')} generations, {stats.events_emitted} events."
    )
    return runtime
