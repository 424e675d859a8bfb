"""The relay inside a vendor's own process: the Hermes plugin and the claude-agent-sdk adapter.

The SDK adapter is tested with the SDK's own types (``claude_agent_sdk``: ``HookMatcher``,
the hook input TypedDicts, ``HookContext``, ``ClaudeAgentOptions``), no live model.
Hermes is not a PyPI dependency: its plugin is exercised through the two calls its
loader makes (``register(ctx)`` with ``ctx.register_hook``; hooks called with keyword
arguments), as ``hermes_cli/plugins.py`` documents them.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookContext,
    HookMatcher,
    PostToolUseHookInput,
    StopHookInput,
)

from live_steering import Disposition
from live_steering.hooks import SqliteHookStore, claude_sdk, hermes, instruct
from live_steering.hooks._install import write_hermes_plugin


class FakeHermesContext:
    """The slice of Hermes 0.19.0's ``PluginContext`` a plugin uses: ``register_hook`` and its
    ``manifest`` (``key``, ``name``). It has no accessor for a plugin's settings: they live in
    ``config.yaml`` under ``plugins.entries.<id>``, which ``plugin_settings`` serves."""

    def __init__(self) -> None:
        self.hooks: dict[str, list[Callable[..., Any]]] = {}
        self.manifest = types.SimpleNamespace(key="", name="live-steering")

    def register_hook(self, name: str, callback: Callable[..., Any]) -> None:
        self.hooks.setdefault(name, []).append(callback)


@pytest.fixture
def plugin_settings(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """The plugin's entry of Hermes's config, as ``hermes_cli.config.load_config()`` returns it
    (Hermes's own plugin code reads ``plugins.entries.<id>`` that way, ``hermes_cli/plugins.py``)."""
    settings: dict[str, object] = {}
    config = types.ModuleType("hermes_cli.config")
    config.load_config = lambda: {"plugins": {"entries": {"live-steering": settings}}}  # type: ignore[attr-defined]
    package = types.ModuleType("hermes_cli")
    package.config = config  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hermes_cli", package)
    monkeypatch.setitem(sys.modules, "hermes_cli.config", config)
    return settings


@pytest.fixture
def store(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "hooks.db")


def test_hermes_plugin_returns_context_at_pre_llm_call(
    store: str, plugin_settings: dict[str, object]
) -> None:
    """pre_llm_call returns {"context": ...} with the queued instructions; the next call returns None."""
    plugin_settings["store"] = store
    ctx = FakeHermesContext()
    hermes.register(ctx)
    assert set(ctx.hooks) == {"pre_llm_call", "on_session_start", "on_session_finalize"}
    instruct("20261201_141502_a1b2c3", "Use the corrected path", id="c1", store=store)
    (pre_llm_call,) = ctx.hooks["pre_llm_call"]
    kwargs = {"session_id": "20261201_141502_a1b2c3", "user_message": "go on", "is_first_turn": False}
    assert pre_llm_call(**kwargs) == {"context": "Use the corrected path"}
    assert pre_llm_call(**kwargs) is None
    receipt = instruct("20261201_141502_a1b2c3", "Use the corrected path", id="c1", store=store)
    assert receipt.disposition is Disposition.APPLIED


def test_hermes_plugin_drops_at_on_session_finalize(store: str, plugin_settings: dict[str, object]) -> None:
    """on_session_finalize of a session that ran drops what is queued (audited); later ones are refused."""
    plugin_settings["store"] = store
    ctx = FakeHermesContext()
    hermes.register(ctx)
    (start,) = ctx.hooks["on_session_start"]
    start(session_id="s", model="m", platform="cli")  # the session ran: a hook of it is recorded
    instruct("s", "Too late", id="c1", store=store)
    (finalize,) = ctx.hooks["on_session_finalize"]
    assert finalize(session_id="s", platform="cli", reason="shutdown") is None
    assert instruct("s", "Too late", id="c1", store=store).disposition is Disposition.HELD
    assert instruct("s", "Later", id="c2", store=store).reason == "session-ended"


def test_hermes_finalize_of_a_session_that_never_ran_drops_nothing(
    store: str, plugin_settings: dict[str, object]
) -> None:
    """A mistyped `hermes chat --resume ID` finalizes an id no hook ran for: its queue stays, live."""
    plugin_settings["store"] = store
    ctx = FakeHermesContext()
    hermes.register(ctx)
    instruct("typo", "Kept", id="c1", store=store)
    (finalize,) = ctx.hooks["on_session_finalize"]
    assert finalize(session_id="typo", platform="cli", reason="shutdown") is None
    assert instruct("typo", "Kept", id="c1", store=store).disposition is Disposition.QUEUED
    assert instruct("typo", "More", id="c2", store=store).accepted


def test_hermes_plugin_never_raises_into_hermes(
    tmp_path: pathlib.Path, plugin_settings: dict[str, object]
) -> None:
    """An unusable store or a call without a session id answers None; Hermes carries on."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    plugin_settings["store"] = str(blocker / "hooks.db")
    ctx = FakeHermesContext()
    hermes.register(ctx)
    (pre_llm_call,) = ctx.hooks["pre_llm_call"]
    assert pre_llm_call(session_id="s") is None
    assert pre_llm_call() is None


def test_written_hermes_plugin_is_loadable_and_registers(tmp_path: pathlib.Path, store: str) -> None:
    """hooks install hermes --plugin writes plugin.yaml and an __init__.py whose register(ctx) works."""
    files = write_hermes_plugin(str(tmp_path / "live-steering"), store)
    manifest = (tmp_path / "live-steering" / "plugin.yaml").read_text()
    assert "name: live-steering\n" in manifest
    assert "  - pre_llm_call\n  - on_session_start\n  - on_session_finalize\n" in manifest
    spec = importlib.util.spec_from_file_location("hermes_plugin_under_test", files[1])
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ctx = FakeHermesContext()
    module.register(ctx)
    instruct("s", "t", id="c", store=store)
    assert ctx.hooks["pre_llm_call"][0](session_id="s") == {"context": "t"}


def test_hermes_register_reads_the_store_setting_and_falls_back_to_the_default(
    tmp_path: pathlib.Path, plugin_settings: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """register(ctx) takes ``plugins.entries.live-steering.store`` from Hermes's config (the
    manifest's key first, then its name); no setting, a setting that is not a path, or no
    Hermes config module at all: the default store (``$LIVE_STEERING_STORE`` here)."""
    default = str(tmp_path / "default.db")
    monkeypatch.setenv("LIVE_STEERING_STORE", default)
    plugin_settings["store"] = str(tmp_path / "configured.db")
    ctx = FakeHermesContext()
    assert hermes.configured_store(ctx) == str(tmp_path / "configured.db")
    ctx.manifest.key = "another-id"  # Hermes names the entry by the key when there is one
    assert hermes.configured_store(ctx) is None
    ctx.manifest.key = ""
    hermes.register(ctx)
    instruct("s", "to the configured store", id="c", store=str(tmp_path / "configured.db"))
    assert ctx.hooks["pre_llm_call"][0](session_id="s") == {"context": "to the configured store"}
    plugin_settings["store"] = 42
    assert hermes.configured_store(ctx) is None
    monkeypatch.delitem(sys.modules, "hermes_cli.config")
    monkeypatch.setitem(sys.modules, "hermes_cli", types.ModuleType("hermes_cli"))
    assert hermes.configured_store(ctx) is None
    other = FakeHermesContext()
    hermes.register(other)
    instruct("s2", "to the default store", id="d", store=default)
    assert other.hooks["pre_llm_call"][0](session_id="s2") == {"context": "to the default store"}


# -- claude-agent-sdk ---------------------------------------------------------------------


def test_sdk_hooks_plug_into_claude_agent_options(store: str) -> None:
    """steering_hooks() is a valid hooks= mapping of HookMatcher for ClaudeAgentOptions."""
    hooks = claude_sdk.steering_hooks(store=store)
    options = ClaudeAgentOptions(hooks=hooks)
    assert options.hooks is hooks
    assert set(hooks) == set(claude_sdk.SDK_EVENTS)
    assert all(isinstance(m, HookMatcher) and len(m.hooks) == 1 for ms in hooks.values() for m in ms)


async def test_sdk_callback_returns_hook_specific_output(anyio_backend: str, store: str) -> None:
    """The PostToolUse callback returns the same hookSpecificOutput as the hook command, once."""
    instruct("sdk-session", "Use the corrected path", id="c1", store=store)
    (matcher,) = claude_sdk.steering_hooks(store=store)["PostToolUse"]
    payload: PostToolUseHookInput = {
        "session_id": "sdk-session",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp",
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q"},
        "tool_response": {"stdout": "ok"},
        "tool_use_id": "toolu_1",
    }
    context: HookContext = {"signal": None}
    output = await matcher.hooks[0](payload, "toolu_1", context)
    assert output == {
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "Use the corrected path"}
    }
    assert await matcher.hooks[0](payload, "toolu_1", context) == {}


async def test_sdk_callback_in_a_subagent_takes_only_its_own(anyio_backend: str, store: str) -> None:
    """A callback whose input carries agent_id (a subagent) passes the main agent's instruction
    by and takes the one sent to that agent; the events name the agent."""
    instruct("sdk-session", "For the main agent", id="m1", store=store)
    instruct("sdk-session", "For the explorer", id="a1", store=store, agent_id="agent-9")
    (matcher,) = claude_sdk.steering_hooks(store=store)["PostToolUse"]
    payload: PostToolUseHookInput = {
        "session_id": "sdk-session",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp",
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_response": {"stdout": "ok"},
        "tool_use_id": "toolu_2",
        "agent_id": "agent-9",
        "agent_type": "Explore",
    }
    context: HookContext = {"signal": None}
    output = await matcher.hooks[0](payload, "toolu_2", context)
    explorer = {"hookEventName": "PostToolUse", "additionalContext": "For the explorer"}
    assert output == {"hookSpecificOutput": explorer}
    main_agent = {k: v for k, v in payload.items() if k not in ("agent_id", "agent_type")}
    output = await matcher.hooks[0](main_agent, "toolu_3", context)  # type: ignore[arg-type]
    main_reply = {"hookEventName": "PostToolUse", "additionalContext": "For the main agent"}
    assert output == {"hookSpecificOutput": main_reply}
    with SqliteHookStore(store) as s:
        took = {e["command_id"]: e["agent_id"] for e in s.events() if str(e["type"]).endswith(".delivered")}
    assert took == {"a1": "agent-9", "m1": None}


async def test_sdk_end_session_drops_what_is_queued(anyio_backend: str, store: str) -> None:
    """end_session() is the SDK host's SessionEnd: queued instructions are dropped, audited."""
    instruct("sdk-session", "Never sent", id="c1", store=store)
    await claude_sdk.end_session("sdk-session", store=store)
    (matcher,) = claude_sdk.steering_hooks(store=store)["Stop"]
    stop: StopHookInput = {
        "session_id": "sdk-session",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }
    assert await matcher.hooks[0](stop, None, {"signal": None}) == {}
    with SqliteHookStore(store) as s:
        assert [e["type"] for e in s.events() if "dropped" in str(e["type"])] == [
            "x.claude-code.instruction.dropped"
        ]
