"""The public surface: ``live_steering.__all__`` is exactly what hosts may import (STYLE.md), each
public subpackage and module has an ``__all__`` pinned here the same way, and every exception the
library defines shares its one root, ``LiveSteeringError``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest

import live_steering

EXPECTED_EXPORTS = {
    "Input",
    "Receipt",
    "Disposition",
    "RefusalReason",
    "HoldReason",
    "LiveRuntime",
    "Generation",
    "Writer",
    "WriteBarrier",
    "RuntimeStatistics",
    "Subscription",
    "LiveSteeringError",
    "GenerationStateError",
    "GenerationClosedError",
    "RuntimeClosedError",
    "InvariantError",
    "StopReason",
    "GenerationStopped",
    "CheckpointDecisionWarning",
    "UnknownInputError",
}


def test_all_is_exactly_the_public_surface() -> None:
    """The export set is pinned: adding or removing a public name is a deliberate change."""
    assert set(live_steering.__all__) == EXPECTED_EXPORTS
    assert len(live_steering.__all__) == len(set(live_steering.__all__)), "duplicate in __all__"


@pytest.mark.parametrize("name", sorted(EXPECTED_EXPORTS))
def test_each_export_is_importable(name: str) -> None:
    """Every name in ``__all__`` resolves with ``from live_steering import name``."""
    module = importlib.import_module("live_steering")
    assert getattr(module, name) is not None
    namespace: dict[str, object] = {}
    exec(f"from live_steering import {name}", namespace)
    assert namespace[name] is getattr(module, name)


def test_star_import_gives_exactly_all() -> None:
    """``from live_steering import *`` binds exactly the names in ``__all__``."""
    namespace: dict[str, object] = {}
    exec("from live_steering import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == EXPECTED_EXPORTS


def test_errors_share_the_root_and_their_builtin_bases() -> None:
    """Every library error is a LiveSteeringError and subclasses the builtin whose meaning it shares."""
    for name in ("GenerationStateError", "GenerationClosedError", "RuntimeClosedError", "InvariantError"):
        assert issubclass(getattr(live_steering, name), live_steering.LiveSteeringError)
    assert issubclass(live_steering.InvariantError, AssertionError)
    assert issubclass(live_steering.GenerationStateError, RuntimeError)


# -- the public subpackages and modules: each ``__all__`` pinned ------------------------------------

SUBPACKAGE_EXPORTS: dict[str, set[str]] = {
    "live_steering.acp": {
        "DISPOSITION_META",
        "STEER_METHOD",
        "RunTurn",
        "SteerOutcome",
        "SteerResult",
        "SteeringAgent",
        "SteeringSession",
        "Turn",
        "TurnError",
        "TurnResult",
        "serve_stdio",
    },
    "live_steering.acp.chat_completions": {
        "DEFAULT_SYSTEM_PROMPT",
        "READ_FILE_TOOL",
        "REPLY_SEPARATOR",
        "TOOL_CANCELLED_RESULT",
        "TOOL_FAILED_RESULT",
        "TRUNCATED_STREAM_MESSAGE",
        "ChatCompletionsAgent",
        "ChatCompletionsConfig",
        "api_key_from_env",
    },
    "live_steering.acp.scripted": {
        "STEP_METHOD",
        "ClientPace",
        "ScriptedAgent",
        "ScriptedModel",
        "sleep_pace",
    },
    "live_steering.fleet": {
        "Fleet",
        "SQLiteFleet",
        "PostgresFleet",
        "Lease",
        "FleetStatistics",
        "OwnerStatistics",
        "StopResult",
        "UNREACHABLE",
        "NO_OWNER",
        "NOT_RUNNING",
        "FleetError",
        "FencedError",
        "LeaseHeldError",
        "OwnerLostError",
    },
    "live_steering.http": {
        "create_app",
        "STATUS_OF_REASON",
        "STATUS_OF_STOP",
    },
    "live_steering.hooks": {
        "instruct",
        "instruct_async",
        "HookStore",
        "SqliteHookStore",
        "PostgresHookStore",
        "open_store",
        "StoredReceipt",
        "Claim",
        "StoreError",
        "default_store_path",
        "HookSession",
        "HookOutcome",
        "InstructionReceipt",
        "EnqueueResult",
        "HookSessionStatistics",
        "InstructionRefusal",
        "InstructionState",
        "SkipReason",
        "Vendor",
        "VendorProfile",
        "ReplyShape",
        "PROFILES",
        "DEFAULT_QUEUE_CAPACITY",
        "SEPARATOR",
        "REDACTED",
    },
    "live_steering.hooks.claude_sdk": {
        "SDK_EVENTS",
        "end_session",
        "steering_hooks",
    },
    "live_steering.hooks.hermes": {
        "HermesSteering",
        "register",
    },
    "live_steering.otel": {"ATTRIBUTES", "EVENT_NAMES", "instrument"},
    "live_steering.integrations": set(),  # a package of modules, one per framework: nothing of its own
    "live_steering.integrations.amplifier": {
        "CAPABILITY",
        "MODULE_NAME",
        "RUNTIME_CAPABILITY",
        "SKIPPED_TOOL_RESULT",
        "STOPPED_TOOL_RESULT",
        "TOOL_CANCELLED_RESULT",
        "TOOL_FAILED_RESULT",
        "LiveSteeringOrchestrator",
        "mount",
    },
    "live_steering.integrations.langgraph": {
        "METADATA_KEY",
        "SKIPPED_TOOL_RESULT",
        "STOPPED_TOOL_RESULT",
        "LiveSteering",
        "SteeringNotWiredError",
    },
    "live_steering.integrations.openai_agents": {
        "DEFAULT_MAX_TURNS",
        "SKIPPED_TOOL_RESULT",
        "LiveSteering",
        "RunStopped",
        "SteerEntry",
        "SteeredRunResult",
        "SteeredRunStreaming",
        "SteeringHistoryError",
    },
    "live_steering.integrations.pydantic_ai": {
        "SKIPPED_TOOL_RESULT",
        "STOPPED_TOOL_RESULT",
        "LiveSteering",
        "RunStopped",
    },
    "live_steering.journal": {
        "ReceiptJournal",
        "JournalChange",
        "ChangeKind",
        "JournalEntry",
        "JournalStatistics",
        "RecoveryReport",
        "JournalConnection",
        "connect",
        "read_receipts",
        "live_writer",
        "JournalError",
        "JournalCorruptError",
        "JournalBusyError",
    },
    "live_steering.loop": {
        "AgentLoop",
        "Context",
        "ContextEntry",
        "FunctionTools",
        "LoopOutcome",
        "LoopResult",
        "Provider",
        "Reply",
        "SKIPPED_TOOL_RESULT",  # issue 22: the pinned result of a skipped tool call (C31)
        "STOPPED_TOOL_RESULT",  # the result of a call a stopped run never started
        "TOOL_CANCELLED_RESULT",  # the result of a call a cancelled turn left unfinished
        "TOOL_FAILED_RESULT",  # the result of a call a failed turn left unfinished
        "ToolCall",
        "ToolRunner",
    },
    "live_steering.testing": {
        "EventRecorder",
        "Gate",
        "History",
        "HistoryReport",
        "HistoryViolationError",
        "Operation",
        "Violation",
        "check_history",
        "RecordingContext",
        "ScriptError",
        "ScriptedProvider",
        "ScriptedTools",
    },
}
"""Every public module below ``live_steering`` (no part of its name starts with ``_``) and its exact
``__all__``. A wing's optional dependency is installed for the suite (the ``dev`` extra)."""


def _public_modules() -> list[str]:
    """The public modules of the package, found by walking it (importing packages, not modules)."""
    found = []
    for info in pkgutil.walk_packages(live_steering.__path__, "live_steering.", onerror=_raise):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(info.name)
    return sorted(found)


def _raise(name: str) -> None:
    raise ImportError(f"walking the package failed at {name}")


def test_every_public_module_is_pinned() -> None:
    """A new public module (or a removed one) is a deliberate change: it is listed here."""
    assert _public_modules() == sorted(SUBPACKAGE_EXPORTS)


@pytest.mark.parametrize("name", sorted(SUBPACKAGE_EXPORTS))
def test_each_public_module_has_exactly_its_all(name: str) -> None:
    """Its ``__all__`` is explicit and pinned, with no duplicate, and each name in it resolves,
    also through ``from ... import *``."""
    module = importlib.import_module(name)
    exported = module.__dict__.get("__all__")
    assert exported is not None, f"{name} has no __all__"
    assert set(exported) == SUBPACKAGE_EXPORTS[name]
    assert len(exported) == len(set(exported)), f"duplicate in {name}.__all__"
    for export in exported:
        assert getattr(module, export) is not None
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == SUBPACKAGE_EXPORTS[name]


# -- every exception the library defines shares the root ---------------------------------------------

NOT_IMPORTED = {"live_steering.__main__", "live_steering._cli.__main__"}
"""Modules walked but not imported: ``python -m live_steering`` (or ``live_steering._cli``) runs
the command on import."""

KNOWN_OUTSIDE_THE_ROOT: set[str] = set()
"""Exceptions known not to derive from ``LiveSteeringError`` yet (none); each entry must still be true."""


def _all_modules() -> list[types.ModuleType]:
    modules = [live_steering]
    for info in pkgutil.walk_packages(live_steering.__path__, "live_steering.", onerror=_raise):
        if info.name not in NOT_IMPORTED:
            modules.append(importlib.import_module(info.name))
    return modules


def _exceptions_defined_in(module: types.ModuleType) -> list[type[BaseException]]:
    """The exception classes ``module`` defines, at its top level or nested in its classes."""
    found: list[type[BaseException]] = []
    todo = [value for value in vars(module).values() if inspect.isclass(value)]
    while todo:
        cls = todo.pop()
        if cls.__module__ != module.__name__ or cls in found:
            continue
        todo.extend(value for value in vars(cls).values() if inspect.isclass(value))
        if issubclass(cls, BaseException):
            found.append(cls)
    return found


def test_every_exception_the_library_defines_is_a_live_steering_error() -> None:
    """Walk every module of the package (every optional dependency is installed for the suite) and
    check each exception class it defines: a ``LiveSteeringError``. Warnings are categories for
    ``warnings.filterwarnings``, not errors: they subclass the builtin warning that fits."""
    outside, seen = set(), 0
    for module in _all_modules():
        for cls in _exceptions_defined_in(module):
            seen += 1
            if issubclass(cls, Warning):
                assert not issubclass(cls, live_steering.LiveSteeringError)
                continue
            if not issubclass(cls, live_steering.LiveSteeringError):
                outside.add(f"{cls.__module__}.{cls.__qualname__}")
    assert seen >= 25  # the walk found the library's exceptions at all
    assert outside == KNOWN_OUTSIDE_THE_ROOT
