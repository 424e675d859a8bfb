"""What the framework integrations share: importing live_steering pulls in no framework,
and importing an integration without its extra names the install command that fixes it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Top-level modules of the frameworks (and of what they bring in).
FRAMEWORKS = (
    "amplifier_core",
    "pydantic_ai",
    "pydantic_graph",
    "agents",
    "openai",
    "pytest_asyncio",
    "langgraph",
    "langchain_core",
    "langsmith",
)

#: Integration module, the framework module it needs, and the extra that brings it.
EXTRAS = [
    ("live_steering.integrations.amplifier", "amplifier_core", "amplifier"),
    ("live_steering.integrations.pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("live_steering.integrations.openai_agents", "agents", "openai-agents"),
    ("live_steering.integrations.langgraph", "langgraph", "langgraph"),
]


def run_python(code: str) -> str:
    command = [sys.executable, "-c", code]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_import_live_steering_imports_no_framework() -> None:
    """`import live_steering` (and its integrations package, testing and loop) loads no framework module."""
    out = run_python(
        "import sys, json\n"
        "import live_steering, live_steering.integrations, live_steering.testing, live_steering.loop\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {set(FRAMEWORKS)!r})))\n"
    )
    assert json.loads(out) == []


def test_a_missing_extra_names_its_install_command() -> None:
    """Without a framework installed, importing its integration raises ImportError with the pip line."""
    script = (
        "import importlib, json, sys\n"
        "messages = {}\n"
        f"for module, framework, _ in {EXTRAS!r}:\n"
        "    sys.modules[framework] = None  # as if the extra were not installed\n"
        "    try:\n"
        "        importlib.import_module(module)\n"
        "    except ImportError as error:\n"
        "        messages[module] = str(error)\n"
        "    del sys.modules[framework]\n"
        "print(json.dumps(messages))\n"
    )
    messages = json.loads(run_python(script))
    for module, _, extra in EXTRAS:
        assert f"pip install 'live-steering[{extra}]'" in messages[module]


@pytest.mark.parametrize(("module", "framework", "extra"), EXTRAS)
def test_each_extra_is_declared_and_in_dev(module: str, framework: str, extra: str) -> None:
    """Each integration's extra is declared in pyproject.toml, and its requirements are in dev (CI)."""
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    assert extras[extra]
    assert set(extras[extra]) <= set(extras["dev"])


def test_both_asyncio_frameworks_raise_the_same_run_stopped() -> None:
    """pydantic-ai's and the Agents SDK's integrations raise one RunStopped class, a LiveSteeringError."""
    from live_steering import LiveSteeringError
    from live_steering.integrations import openai_agents, pydantic_ai

    assert pydantic_ai.RunStopped is openai_agents.RunStopped
    assert issubclass(pydantic_ai.RunStopped, LiveSteeringError)
    stopped = pydantic_ai.RunStopped("g-1", "generation-stopped", [])
    assert (stopped.generation_id, stopped.reason, stopped.history) == ("g-1", "generation-stopped", [])
