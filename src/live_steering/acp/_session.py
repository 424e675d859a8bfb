"""One ACP session's turns and steers, without the ACP SDK (anyio: asyncio and trio).

Theory of operation. A ``SteeringSession`` owns one ``LiveRuntime``; a turn is
one generation of it, opened here, and what the turn *does* is the agent
author's ``run_turn(turn)``: model requests at ``turn.boundary(...)``, tools,
and ``turn.continue_after_checkpoint()``. ``prompt()`` runs a turn in the
caller's task; ``steer()`` decides what a ``_session/steering`` request does,
holding the session's steer lock so steers are decided one at a time, in
arrival order (anyio locks are FIFO; a steer into an open turn, which decides
without an await, needs the lock only when another steer holds or waits for it):

- a steer whose input id was seen before is a repeat: it answers from the record
  (the runtime's receipt, C10, or the turn it started) and admits nothing;
- a turn is running: the steer is submitted anchored to it -> ``injected``; a
  refusal ``finishing``/``stale-generation`` means the turn closed admission in
  the race, so the steer waits for the turn to wind down and is treated as idle;
- idle: ``promptRequired`` when the client opted in; else the steer is checked
  by the runtime's own admission rules (C7) and becomes the prompt of a new
  turn, answered once that turn's generation is open.

A follow-up (``_meta.liveSteering.kind: "follow_up"``) takes the same path as a
steer, as the runtime input kind ``follow_up`` (C29): into a running turn it is
kept for after it; idle, it starts a turn as a steer does (there is nothing to
come after). When a turn finishes normally with follow-ups kept, the session
claims the next turn for them at once (no await between the end and the claim,
so no prompt or steer slips in between) and runs it as a turn of origin
``"follow_up"``, reported to the client with ``outcome: "startedNewTurn"``;
its first boundary writes the follow-ups. A cancel, stop or failure of the
turn holds them instead (the core decides).

When a turn ends, every steer it admitted is settled (applied, held or unknown)
and each final disposition is sent to the client once (``steer_settled``).

This module never speaks JSON-RPC: ``live_steering.acp`` maps its results and
``SteerRejected`` / ``TurnError`` onto the SDK. It must never hold the steer
lock while waiting for anything but the turn it is deciding about.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

import anyio
import anyio.abc
import attrs

from .. import _admission as admission
from .._core import DEFAULT_MAX_TEXT_CHARS
from .._errors import GenerationClosedError, LiveSteeringError, RuntimeClosedError
from .._runtime import Generation, LiveRuntime, internals
from .._types import Disposition, HoldReason, Input, Receipt, RefusalReason
from .._validate import MAX_ID_CHARS, utf8_encodable
from ._turn import ClientChannel, RunTurn, Turn, TurnError, TurnResult
from ._wire import (
    ErrorKind,
    SteerOutcome,
    SteerRejected,
    SteerRequest,
    SteerResult,
    TurnBusyError,
    steer_input_id,
)

__all__ = ["DEFAULT_MAX_REQUESTS", "STARTED_TURN_IDS_LIMIT", "SteeringSession"]

_log = logging.getLogger(__name__)

#: Most ids a session remembers for steers that started a turn (like C11: never evicted).
STARTED_TURN_IDS_LIMIT: Final = 2_000

#: Model requests a turn may make before it ends with ``max_turn_requests`` (the default).
DEFAULT_MAX_REQUESTS: Final = 16

#: The longest ``generation_prefix`` a runtime takes (``_core``: the id limit less 20 digits).
_MAX_PREFIX_CHARS: Final = MAX_ID_CHARS - 20

#: Seconds a best-effort update to the client may take while a turn winds down after a failure.
_FAREWELL_SECONDS: Final = 1.0

#: Terminal reasons of a turn that ended because something cancelled it.
_CANCELLED: Final = frozenset({HoldReason.GENERATION_CANCELLED.value, HoldReason.RUNTIME_CLOSED.value})

#: Stop reasons ``run_turn`` may return for a turn that finished normally.
_AUTHOR_STOP_REASONS: Final = frozenset({"end_turn", "max_tokens", "refusal"})


class _TurnFailed(LiveSteeringError):
    """Internal: a turn failed; carries what the client is told (``TurnError.data`` plus the lists)."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data["details"])
        self.data = data


# -- the session ------------------------------------------------------------------------------


@attrs.define(eq=False)
class _TurnRecord:
    id: str
    origin: str
    generation: Generation
    """The turn's generation (its id is the turn's), entered by ``_run``."""
    opened: anyio.Event = attrs.field(factory=anyio.Event)
    """Set once the turn's generation is open (or the turn ended without opening one)."""
    done: anyio.Event = attrs.field(factory=anyio.Event)
    """Set once the turn is over and the session is idle again."""
    failed: bool = False
    turn: Turn | None = None
    cancelled: bool = False
    """``session/cancel`` (or shutdown) asked for it, possibly before the generation opened."""
    after: str | None = None
    """For a follow-ups' turn: the turn whose follow-ups it runs."""
    follow_ups: tuple[str, ...] = ()
    """For a follow-ups' turn: the follow-ups carried into it, in order."""


class SteeringSession:
    """One ACP session: a runtime, the author's ``run_turn``, its turns and its steers.

    >>> async with anyio.create_task_group() as tg:            # doctest: +SKIP
    ...     session = SteeringSession("s1", channel, tg, run_turn)
    ...     tg.start_soon(session.prompt, "Fix the test", ())
    ...     result = await session.steer(parse_steer_request(params), request_id=4)
    """

    def __init__(
        self,
        session_id: str,
        channel: ClientChannel,
        task_group: anyio.abc.TaskGroup,
        run_turn: RunTurn,
        *,
        cwd: str = ".",
        max_requests: int = DEFAULT_MAX_REQUESTS,
        max_text_chars: int | None = None,
    ) -> None:
        if type(max_requests) is not int or max_requests < 1:
            raise ValueError(f"max_requests must be a positive int, got {max_requests!r}")
        self.session_id = session_id
        self.cwd = cwd
        # Turn ids are the runtime's issued ids, ``<session id>-turn-<n>``: a counter, not a
        # remembered id per turn, so a long session keeps a bounded memory (issue 11). A
        # session id too long for a prefix keeps the runtime's own ``gen-...-<n>`` ids.
        prefix = f"{session_id}-turn-"
        self.runtime = LiveRuntime(
            session_id=session_id,
            generation_prefix=prefix if len(prefix) <= _MAX_PREFIX_CHARS else None,
            max_text_chars=DEFAULT_MAX_TEXT_CHARS if max_text_chars is None else max_text_chars,
        )
        self._door = internals(self.runtime)
        self.channel = channel
        self.max_requests = max_requests
        self.state: dict[str, Any] = {}
        """The author's per-session dict (``turn.state``)."""
        self.turns: list[TurnResult] = []
        """Every turn that ended, in order."""
        self._run_turn = run_turn
        self._tg = task_group
        self._lock = anyio.Lock()
        self._turn: _TurnRecord | None = None
        self._started: dict[str, tuple[str, SteerResult]] = {}
        """Steers (and idle follow-ups) that started a turn: their text and answer, by input id."""

    # -- turns ---------------------------------------------------------------------------------

    @property
    def running_turn(self) -> str | None:
        """The id of the turn in progress, or ``None`` when idle."""
        return None if self._turn is None else self._turn.id

    def _begin(self, origin: str) -> _TurnRecord:
        """Claim the session for a new turn, synchronously (no await between check and claim)."""
        if self._turn is not None:
            raise TurnBusyError(f"turn {self._turn.id!r} of session {self.session_id!r} is running")
        gen = self.runtime.open_generation()  # issued: ``<session id>-turn-<n>``
        turn = self._turn = _TurnRecord(gen.id, origin, gen)
        return turn

    async def prompt(self, text: str, blocks: tuple[Mapping[str, Any], ...] = ()) -> TurnResult:
        """Run one turn for ``text`` in this task (``session/prompt``). ``TurnBusyError`` if one runs.

        A failed turn raises ``_TurnFailed`` (the adapter answers a JSON-RPC error).
        """
        if not utf8_encodable(text):
            raise SteerRejected(ErrorKind.INVALID_PARAMS, "prompt is not encodable as UTF-8")
        return await self._run(self._begin("prompt"), text, blocks)

    async def _run(self, record: _TurnRecord, text: str, blocks: tuple[Mapping[str, Any], ...]) -> TurnResult:
        info: dict[str, Any] = {"id": record.id, "origin": record.origin}
        if record.after is not None:  # a follow-ups' turn: told as a steer's startedNewTurn is
            info.update(
                outcome=SteerOutcome.STARTED_NEW_TURN.value,
                afterTurnId=record.after,
                followUpInputIds=list(record.follow_ups),
            )
        gen = record.generation
        turn: Turn | None = None
        error: BaseException | None = None
        returned: str | None = None
        try:
            await self.channel.turn_changed({**info, "state": "running"})
            try:
                async with gen:
                    turn = record.turn = Turn(self, record.id, record.origin, text, blocks, gen)
                    if record.cancelled:
                        turn._cancel()
                    record.opened.set()
                    with anyio.CancelScope() as turn._scope:
                        if not record.cancelled:
                            returned = await self._run_turn(turn)
                    if gen.pending and gen.accepting:
                        # run_turn returned without the checkpoint decision (a refusal, say):
                        # what is pending is held, on purpose (no CheckpointDecisionWarning).
                        gen.stop()
            except (GenerationClosedError, RuntimeClosedError):
                # A closed runtime's refusal ends the turn stopped (a stopped turn's own
                # signal, GenerationStopped, is absorbed by the block). Anything else (a
                # boundary after the turn finished) is the author's bug: raised.
                terminal = gen.terminal_event or {}
                if "error" in terminal or terminal.get("reason") is None:
                    raise
        except BaseException as exc:
            record.failed = True
            error = exc
            raise
        finally:
            result = self._result(record, gen, returned)
            following: _TurnRecord | None = None
            if self._turn is record:
                self._turn = None
                if result is not None and result.follow_up_input_ids:
                    following = self._claim_follow_ups(record, result)
                    if following is not None:
                        result = attrs.evolve(result, next_turn_id=following.id)
            record.opened.set()
            record.done.set()
            try:
                if result is not None:
                    self.turns.append(result)
                    await self._report(turn, result, info, failed=error is not None)
            finally:
                if following is not None:  # started after the report: its updates come after
                    self._start_follow_ups(following)
        assert result is not None  # the generation opened: it has a terminal event
        return result

    def _start_follow_ups(self, following: _TurnRecord) -> None:
        try:
            self._tg.start_soon(self._run_detached, following, "", ())
        except RuntimeError:  # the task group is closed (shutdown): the turn never runs
            if self._turn is following:
                self._turn = None
            following.opened.set()
            following.done.set()  # nobody waits for it; the runtime's close holds its follow-ups

    def _claim_follow_ups(self, record: _TurnRecord, result: TurnResult) -> _TurnRecord | None:
        """Claim the turn that runs the follow-ups ``record`` finished with (C29), synchronously.

        Its generation, opened next, is the one the core carries them into. None when
        the runtime closed meanwhile (then the core holds them, ``runtime-closed``).
        """
        if self.runtime.closed or not self.runtime.pending_follow_ups:
            return None
        following = self._begin("follow_up")
        following.after = record.id
        following.follow_ups = result.follow_up_input_ids
        # A session/cancel that came after the generation finished, before this claim, still
        # stops the plan: the turn starts cancelled and its follow-ups are held.
        following.cancelled = record.cancelled
        return following

    async def _report(
        self, turn: Turn | None, result: TurnResult, info: dict[str, Any], *, failed: bool
    ) -> None:
        """Settle every steer of the turn with the client, then report the turn's end.

        Settled first: a client that reads the prompt's answer already has them all.
        After a failure or a cancellation (the client went away) this is best effort:
        shielded, bounded, and never in place of the original exception.
        """
        with anyio.CancelScope(shield=failed), anyio.move_on_after(_FAREWELL_SECONDS if failed else None):
            try:
                await self._settle_all(turn, result)
                state = "failed" if failed else "ended"
                lists = {k: v for k, v in result.to_meta().items() if k != "turnId"}
                await self.channel.turn_changed(
                    {**info, "state": state, "stopReason": result.stop_reason, **lists}
                )
            except (ConnectionError, OSError):
                _log.info("could not report the end of turn %s: the client is gone", result.turn_id)
            except Exception:
                if not failed:
                    raise
                _log.warning("could not report the end of turn %s", result.turn_id, exc_info=True)

    def _result(self, record: _TurnRecord, gen: Generation, returned: str | None) -> TurnResult | None:
        """The turn's result from its terminal event (None when its generation never opened)."""
        terminal = gen.terminal_event
        if terminal is None:
            return None
        held: list[str] = []
        unknown: list[str] = []
        carried: list[str] = []
        for input_id in terminal["accepted_input_ids"]:
            receipt = self.runtime.receipt(input_id)
            if receipt is not None and receipt.disposition is Disposition.UNKNOWN:
                unknown.append(input_id)
            elif receipt is not None and receipt.disposition is Disposition.QUEUED:
                carried.append(input_id)  # a follow-up, kept for the next turn (C29)
            else:
                held.append(input_id)
        reason = terminal.get("reason")
        if "error" in terminal:  # generation.failed
            stop = "failed"
        elif reason is None:  # generation.finished
            stop = returned if returned in _AUTHOR_STOP_REASONS else "end_turn"
        elif reason == HoldReason.BUDGET_EXHAUSTED.value:
            stop = "max_turn_requests"
        elif record.cancelled or reason in _CANCELLED:
            stop = "cancelled"
        else:  # run_turn returned without the checkpoint decision: what was pending is held
            stop = returned if returned in _AUTHOR_STOP_REASONS else "end_turn"
        return TurnResult(
            record.id,
            record.origin,
            stop,
            tuple(terminal["input_ids"]),
            tuple(held),
            tuple(unknown),
            follow_up_input_ids=tuple(carried),
        )

    async def _settle_all(self, turn: Turn | None, result: TurnResult) -> None:
        if turn is None:
            return
        for input_id in (*result.applied_input_ids, *result.held_input_ids, *result.unknown_input_ids):
            receipt = self.runtime.receipt(input_id)
            if receipt is not None:
                await turn._settle(receipt)

    async def run_prompt(self, text: str, blocks: tuple[Mapping[str, Any], ...] = ()) -> TurnResult:
        """``prompt``, with a failure turned into ``_TurnFailed`` carrying what the client is told."""
        try:
            return await self.prompt(text, blocks)
        except (SteerRejected, TurnBusyError):
            raise
        except Exception as exc:
            raise self._failure(exc) from exc

    def _failure(self, exc: Exception) -> _TurnFailed:
        data: dict[str, Any]
        if isinstance(exc, TurnError):
            data = dict(exc.data)
        else:
            data = {"details": f"the turn failed: {type(exc).__name__}"}
        if isinstance(exc, ConnectionError | OSError):
            _log.info("turn of session %s ended: the client is gone (%s)", self.session_id, exc)
        elif not isinstance(exc, TurnError):
            _log.error("turn of session %s failed", self.session_id, exc_info=exc)
        if self.turns and (last := self.turns[-1]).stop_reason == "failed":
            data["liveSteering"] = last.to_meta()
        return _TurnFailed(data)

    async def _run_detached(
        self, record: _TurnRecord, text: str, blocks: tuple[Mapping[str, Any], ...]
    ) -> None:
        """A turn started by a steer or by follow-ups: nobody awaits it, so its failure is
        reported, not raised."""
        try:
            await self._run(record, text, blocks)
        except Exception as exc:  # _run already sent the "failed" turn update
            self._failure(exc)

    def cancel(self) -> None:
        """``session/cancel``: stop the running turn (its pending steers are held, C17). Idle: no-op."""
        record = self._turn
        if record is None:
            return
        record.cancelled = True
        if record.turn is not None:
            record.turn._cancel()

    async def wait_idle(self) -> None:
        """Wait until no turn runs."""
        while (record := self._turn) is not None:
            await record.done.wait()

    async def aclose(self) -> None:
        self.cancel()
        await self.runtime.aclose()

    # -- steers --------------------------------------------------------------------------------

    async def steer(self, request: SteerRequest, *, request_id: object = None) -> SteerResult:
        """Decide one ``_session/steering`` request, in arrival order with the session's other steers.

        Raises ``SteerRejected`` for what the protocol answers with an error; an
        unexpected failure is the outcome ``failed``, never an exception.
        """
        input_id = steer_input_id(self.session_id, steer_id=request.steer_id, request_id=request_id)
        if input_id is None:
            input_id = Input("steer", request.text).id  # a fresh random id: no retry identity
        lock = self._lock
        race: _TurnRecord | None = None
        if not lock.locked():
            # Nobody is deciding or queued (anyio hands a released lock straight to its next
            # waiter), and a steer into a running turn decides with no await at all (the
            # nowait submit): decided here, it needs no lock, which keeps a steer's round
            # trip close to a request the SDK answers at once (acp_steer_roundtrip).
            try:
                now = self._decide_now(request, input_id)
            except SteerRejected:
                raise
            except Exception as error:
                return self._internal_error(input_id, error)
            if isinstance(now, SteerResult):
                return now
            race = now
            # Still no await since the check: the lock is free, and taking it keeps the order.
            lock.acquire_nowait()
        else:
            await lock.acquire()
        try:
            try:
                return await self._decide(request, input_id, race)
            except SteerRejected:
                raise
            except Exception as error:
                return self._internal_error(input_id, error)
        finally:
            lock.release()

    def _internal_error(self, input_id: str, error: Exception) -> SteerResult:
        _log.error("steer of session %s failed", self.session_id, exc_info=error)
        return SteerResult(SteerOutcome.FAILED, input_id, reason=f"internal-error: {type(error).__name__}")

    def _decide_now(self, request: SteerRequest, input_id: str) -> SteerResult | _TurnRecord | None:
        """The steer into a running turn, decided without an await, when that is all it is.

        A ``SteerResult`` is the answer; ``None``: nothing was done, ``_decide`` decides
        it all; a turn: the steer was refused in the end-of-turn race (``finishing`` /
        ``stale-generation``) and ``_decide`` goes on from waiting for that turn.
        """
        turn = self._turn
        if (
            turn is None
            or not turn.opened.is_set()
            or input_id in self._started
            or self.runtime.receipt(input_id) is not None
        ):
            return None
        if self._door.running_generation_id() != turn.id:
            return None
        kind = request.kind
        receipt = self.runtime.submit_steering_nowait(Input(kind, request.text, id=input_id), turn.id)
        if receipt.accepted:
            return SteerResult(SteerOutcome.INJECTED, input_id, receipt=receipt, turn_id=turn.id, kind=kind)
        if receipt.reason not in (RefusalReason.FINISHING, RefusalReason.STALE_GENERATION):
            return _refused(input_id, receipt)
        return turn

    @staticmethod
    def _idle_refusal(answer: str, problem: str | None, input_id: str) -> SteerResult:
        """The ACP form of a refusal ``_admission.decide`` gave for a steer no running turn took:
        ``invalid-input`` and ``identity-conflict`` are the client's error (invalidParams), the
        others a ``failed`` outcome with the reason."""
        if answer == admission.IDENTITY_CONFLICT:
            raise _conflict(input_id)
        if answer == admission.INVALID_INPUT:
            raise SteerRejected(
                ErrorKind.INVALID_PARAMS,
                f"steer refused: {answer} ({problem})",
                reason=answer,
                inputId=input_id,
            )
        return SteerResult(SteerOutcome.FAILED, input_id, reason=answer)

    async def _decide(
        self, request: SteerRequest, input_id: str, race: _TurnRecord | None = None
    ) -> SteerResult:
        """Decide the steer, holding the lock; ``race``: ``_decide_now`` was refused in that
        turn's end-of-turn race, and the decision goes on from waiting for it to wind down."""
        steer = Input(request.kind, request.text, id=input_id)
        kind = request.kind
        door = self._door
        if race is not None:  # refused in the race: once that turn has wound down, go on
            await race.done.wait()
        else:
            # A retry of a steer that started a turn: a retained identity of this session, answered
            # from the record in the core's one order (C7): closed, repeat, invalid-input, conflict.
            if (record := self._started.get(input_id)) is not None:
                text, result = record
                same = text == request.text and result.kind == kind
                problem = None if same else door.input_problem(steer)
                answer = admission.decide(closed=self.runtime.closed, known=True, same=same, problem=problem)
                if answer == admission.REPEAT:
                    return attrs.evolve(result, repeated=True)
                return self._idle_refusal(answer, problem, input_id)
            # A retry of an injected steer: the runtime answers with its current receipt (C10).
            if (known := self.runtime.receipt(input_id)) is not None:
                receipt = self.runtime.submit_steering_nowait(steer, known.generation_id)
                if not receipt.accepted:
                    return _refused(input_id, receipt)  # identity-conflict (other text) raises invalidParams
                return SteerResult(
                    SteerOutcome.INJECTED,
                    input_id,
                    receipt=receipt,
                    turn_id=receipt.generation_id,
                    repeated=True,
                    kind=kind,
                )
        while (turn := self._turn) is not None:
            if not turn.opened.is_set():  # a set anyio Event still yields in wait(): skip it
                await turn.opened.wait()
            if door.running_generation_id() == turn.id:
                receipt = self.runtime.submit_steering_nowait(steer, turn.id)
                if receipt.accepted:
                    return SteerResult(
                        SteerOutcome.INJECTED, input_id, receipt=receipt, turn_id=turn.id, kind=kind
                    )
                if receipt.reason not in (RefusalReason.FINISHING, RefusalReason.STALE_GENERATION):
                    return _refused(input_id, receipt)
            # The turn closed admission in the race: once it has wound down, this steer is idle.
            await turn.done.wait()
        # The same order as a steer into a running turn (C7): a steer that would be refused
        # there never becomes a new turn's prompt here, nor is it handed back to the client as
        # one (promptRequired); only a turn started here counts against the started-turn ids.
        problem = door.input_problem(steer)
        full = not request.prompt_required and len(self._started) >= STARTED_TURN_IDS_LIMIT
        answer = admission.decide(closed=self.runtime.closed, problem=problem, full=full)
        if answer != admission.ADMIT:
            return self._idle_refusal(answer, problem, input_id)
        if request.prompt_required:
            return SteerResult(SteerOutcome.PROMPT_REQUIRED, input_id, reason="noRunningTurn", kind=kind)
        turn = self._begin("steer")
        self._tg.start_soon(self._run_detached, turn, request.text, request.blocks)
        # Recorded before the wait: if this request is cancelled while the turn starts,
        # the client's retry is still a repeat of this steer, not a second turn.
        # An idle follow-up starts a turn as a steer does: no turn runs that it could come after.
        result = SteerResult(SteerOutcome.STARTED_NEW_TURN, input_id, turn_id=turn.id, kind=kind)
        self._started[input_id] = (request.text, result)
        await turn.opened.wait()
        if turn.failed and turn.turn is None:
            del self._started[input_id]  # nothing of it ran: a retry may try again
            return SteerResult(
                SteerOutcome.FAILED, input_id, reason="turn-failed", turn_id=turn.id, kind=kind
            )
        return result


def _conflict(input_id: str) -> SteerRejected:
    return SteerRejected(
        ErrorKind.INVALID_PARAMS,
        "this id was already used for another input (other text, or the other kind)",
        reason=RefusalReason.IDENTITY_CONFLICT.value,
        inputId=input_id,
    )


def _refused(input_id: str, receipt: Receipt) -> SteerResult:
    """A refusal for a running turn other than the end-of-turn race."""
    if receipt.reason == RefusalReason.IDENTITY_CONFLICT:
        raise _conflict(input_id)  # the same words as when idle
    if receipt.reason == RefusalReason.INVALID_INPUT:
        raise SteerRejected(
            ErrorKind.INVALID_PARAMS,
            f"steer refused: {receipt.reason}",
            reason=receipt.reason,
            inputId=input_id,
        )
    return SteerResult(SteerOutcome.FAILED, input_id, reason=receipt.reason, receipt=receipt)
