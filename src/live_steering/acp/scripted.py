"""The scripted test-bed agent of ``live-steering acp``: a deterministic model, built on the public API.

Each model request says what it received since the previous one, so a client
sees exactly where a steer landed. The ``k``-th request after a user prompt
(1-based) asks for one tool call while ``k < steps``, then answers with text
only. ``pace`` runs before each answer: it sleeps ``step_delay`` seconds, or,
with ``client_paced``, waits for the client's ``_liveSteering/step``
notification (a test then writes "steer while request 2 is in flight" as a
sequence, never a sleep).

It uses only ``live_steering.acp``'s public names: it is one user of that API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import acp
import anyio
import attrs
from acp.schema import ContentToolCallContent, TextContentBlock

from live_steering import Input
from live_steering.acp import SteeringAgent, Turn

__all__ = ["STEP_METHOD", "ClientPace", "ScriptedAgent", "ScriptedModel", "sleep_pace"]

#: The notification that releases model requests of a ``client_paced`` agent.
STEP_METHOD: Final = "_liveSteering/step"

#: Called with the 0-based request index before the scripted model answers; it paces the turn.
Pace = Callable[[int], Awaitable[None]]


def sleep_pace(delay: float) -> Pace:
    """A ``Pace`` that sleeps ``delay`` seconds per request (simulated model latency)."""

    async def pace(index: int) -> None:
        await anyio.sleep(delay)

    return pace


class ClientPace:
    """A ``Pace`` driven by the client: request ``n`` waits until ``release`` allowed ``n + 1`` answers."""

    def __init__(self) -> None:
        self.allowed = 0
        self._changed = anyio.Event()

    def release(self, count: int = 1) -> None:
        self.allowed += count
        self._changed.set()
        self._changed = anyio.Event()

    async def __call__(self, index: int) -> None:
        while self.allowed <= index:
            await self._changed.wait()


@attrs.frozen
class Entry:
    """One entry of the scripted model's context."""

    role: str
    """``"user"``, ``"assistant"``, ``"tool"`` or ``"steer"``."""
    text: str
    input_id: str | None = None


class ScriptedModel:
    """One session's scripted model: its context and every request it received."""

    def __init__(self, steps: int, pace: Pace) -> None:
        if type(steps) is not int or steps < 1:
            raise ValueError(f"steps must be a positive int, got {steps!r}")
        self.steps = steps
        self.pace = pace
        self.context: list[Entry] = []
        self.requests: list[tuple[Entry, ...]] = []
        """What each model request received (the whole context at that moment)."""
        self._seen = 0
        self._step = 0

    async def add_steer(self, steer: Input, metadata: Mapping[str, Any]) -> None:
        """The boundary's writer: a follow-up is the user's next request (C29), a steer a steer."""
        role = "user" if metadata.get("kind") == "follow_up" else "steer"
        self.context.append(Entry(role, steer.text, metadata["input_id"]))

    async def run_turn(self, turn: Turn) -> None:
        if turn.prompt:  # a follow-ups' turn has none: its follow-ups come through add_steer
            self.context.append(Entry("user", turn.prompt))
        while True:
            await turn.boundary(self.add_steer)
            done = await self._request(turn)
            if not done:
                continue
            if not turn.continue_after_checkpoint():
                break

    async def _request(self, turn: Turn) -> bool:
        """One model request; True when the reply has no tool call."""
        index = len(self.requests)
        self.requests.append(tuple(self.context))
        new = [e for e in self.context[self._seen :] if e.role in ("user", "steer")]
        self._seen = len(self.context)
        self._step = 1 if any(e.role == "user" for e in new) else self._step + 1
        in_flight = {"liveSteering": {"request": index + 1, "state": "in-flight"}}
        working = f"Working on model request {index + 1}"
        await turn.think(working, in_flight, message_id=turn.message_id("thought"))
        await self.pace(index)
        heard = "; ".join(f"{e.role} {e.text!r}" for e in new) or "nothing new"
        text = f"Step {self._step}/{self.steps} (request {index + 1}) received: {heard}"
        received = [
            {"role": e.role, "text": e.text, **({"inputId": e.input_id} if e.input_id else {})} for e in new
        ]
        meta = {"liveSteering": {"request": index + 1, "step": self._step, "received": received}}
        await turn.say(text, meta, message_id=turn.message_id())
        self.context.append(Entry("assistant", text))
        if self._step >= self.steps:
            return True
        call_id = f"call-{index + 1}"
        await turn.update(
            acp.start_tool_call(
                call_id,
                f"work (step {self._step})",
                kind="other",
                status="in_progress",
                raw_input={"step": self._step},
            )
        )
        result = f"step {self._step} done"
        content = [ContentToolCallContent(type="content", content=TextContentBlock(type="text", text=result))]
        await turn.update(
            acp.update_tool_call(call_id, status="completed", content=content, raw_output=result)
        )
        self.context.append(Entry("tool", result))
        return False


class ScriptedAgent(SteeringAgent):
    """``live-steering acp`` without a model endpoint: ``SteeringAgent`` over ``ScriptedModel``."""

    def __init__(self, *, steps: int = 6, step_delay: float = 0.5, client_paced: bool = False) -> None:
        title = "live_steering scripted agent"
        super().__init__(
            self._run_turn_of_session, name="live-steering", title=title, max_requests=steps + 16
        )
        if type(steps) is not int or steps < 1:
            raise ValueError(f"steps must be a positive int, got {steps!r}")
        self.steps = steps
        self.step_delay = step_delay
        self.client_paced = client_paced

    def model(self, session_id: str) -> ScriptedModel | None:
        """The scripted model of a session (made at its first turn or step)."""
        session = self.session(session_id)
        if session is None:
            return None
        model = session.state.get("scripted")
        if model is None:
            pace: Pace = ClientPace() if self.client_paced else sleep_pace(self.step_delay)
            model = session.state["scripted"] = ScriptedModel(self.steps, pace)
        assert isinstance(model, ScriptedModel)
        return model

    async def _run_turn_of_session(self, turn: Turn) -> None:
        model = self.model(turn.session_id)
        assert model is not None  # the turn's session exists
        await model.run_turn(turn)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        """``_liveSteering/step {sessionId, count?}``: let ``count`` (default 1) more requests answer.
        Any other notification is the agent's (a ``_session/steering`` notification is a steer)."""
        if f"_{method}" != STEP_METHOD:
            await super().ext_notification(method, params)
            return
        session_id = params.get("sessionId")
        model = self.model(session_id) if isinstance(session_id, str) else None
        count = params.get("count", 1)
        if (
            model is not None
            and isinstance(model.pace, ClientPace)
            and type(count) is int
            and 0 < count <= 10**6
        ):
            model.pace.release(count)
