"""The docs stay true to the code: runnable examples, resolving links, an exact event reference."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from live_steering import Input, LiveRuntime

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("**/*.md"))  # docs/integrations/ too
PAGES = [ROOT / "README.md", *DOCS]
EXAMPLE_HEADER = re.compile(r"\A# (examples/[\w.]+\.py)\n")
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]+`")  # a link shown as code is not a link
LINK = re.compile(r"\]\(([^)\s]+)\)")


#: The core pages (issue 2). Every python block in them is a whole examples/ file; other
#: pages may show examples that way too, and are held to it when they do.
CORE_PAGES = ("concepts.md", "embedding.md", "hosts.md", "events.md", "testing.md")


def test_every_docs_page_exists() -> None:
    """The pages the README links to are all there."""
    assert set(CORE_PAGES) <= {path.name for path in DOCS}


@pytest.mark.parametrize("page", DOCS, ids=lambda path: path.name)
def test_python_blocks_are_the_runnable_examples(page: Path) -> None:
    """A python block naming its examples/ file on line 1 is that file, byte for byte (core pages: all)."""
    blocks = PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))
    for block in blocks:
        header = EXAMPLE_HEADER.match(block)
        if header is None and page.name not in CORE_PAGES:
            continue  # another page's own convention; its tests run it
        assert header is not None, f"{page.name}: a python block does not start with '# examples/<name>.py'"
        example = ROOT / header.group(1)
        assert example.is_file(), f"{page.name}: {header.group(1)} does not exist"
        assert block == example.read_text(encoding="utf-8"), f"{page.name}: block differs from {example.name}"


def test_every_example_is_shown_in_the_docs() -> None:
    """Every docs example (an examples/*.py opening with its own path) is shown whole in some page."""
    shown = {
        header.group(1)
        for page in DOCS
        for block in PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))
        if (header := EXAMPLE_HEADER.match(block)) is not None
    }
    examples = {
        f"examples/{path.name}"
        for path in (ROOT / "examples").glob("*.py")
        if EXAMPLE_HEADER.match(path.read_text(encoding="utf-8"))
    }
    assert len(examples) >= 5
    assert examples == shown


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes for a page's headings (lower case, punctuation dropped, '-' for ' ')."""
    text = page.read_text(encoding="utf-8")
    headings = re.findall(r"^#+ (.+)$", PYTHON_BLOCK.sub("", text), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.name)
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link in README.md and docs/ points at a file of the repository, and at a heading."""
    prose = INLINE_CODE.sub("", PYTHON_BLOCK.sub("", page.read_text(encoding="utf-8")))
    for target in LINK.findall(prose):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        assert path.exists(), f"{page.name}: broken link {target}"
        if anchor:
            assert anchor in anchors(path), f"{page.name}: no heading for {target}"


def test_quickstart_holds_exactly_the_two_commands() -> None:
    """README's Quickstart block holds exactly the two fresh-clone commands (demo, then the suite)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Quickstart\n.*?```bash\n(.*?)```", readme, re.S | re.M)
    assert match is not None
    assert match.group(1).splitlines() == [
        "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/live-steering demo",
        "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest -q",
    ]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def documented_events() -> dict[str, set[str]]:
    """Event type -> extra fields, from the tables of docs/events.md."""
    text = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z]+\.[a-z]+)` \| ([^|]*) \|", text, re.M)
    return {type_: set(re.findall(r"`(\w+)`", fields)) for type_, fields in rows}


async def every_event_type() -> list[dict[str, object]]:
    """Drive a runtime through every event type it can publish; return the stream."""
    runtime = LiveRuntime(session_id="docs")
    events: list[dict[str, object]] = []
    runtime.add_listener(events.append)

    def write(steer: Input, metadata: object) -> None:
        if steer.text == "boom":
            raise OSError("disk full")

    async with runtime.open_generation("g1") as gen:  # started, accepted, delivered, applied, continued
        await runtime.submit_steering(Input("steer", "a", id="a"), "g1")
        await runtime.submit_steering(Input("steer", "a", id="a"), "g1")  # repeated
        await runtime.submit_steering(Input("steer", " ", id="bad"), "g1")  # refused
        assert gen.continue_after_checkpoint()
        await gen.boundary(write)
        assert not gen.continue_after_checkpoint()  # finished
    async with runtime.open_generation("g2") as gen:  # tools.skipped, stopped, held
        await runtime.submit_steering(Input("steer", "b", id="b"), "g2")
        gen.skip_tools(["call-2"])
        gen.stop()
    with contextlib.suppress(OSError):
        async with runtime.open_generation("g3") as gen:  # unknown, failed
            await runtime.submit_steering(Input("steer", "boom", id="c"), "g3")
            await gen.boundary(write)
    with anyio.CancelScope() as scope:  # cancelled
        async with runtime.open_generation("g4"):
            scope.cancel()
            await anyio.lowlevel.checkpoint()
    await runtime.aclose()
    return events


@pytest.mark.anyio
async def test_event_reference_matches_the_events_published() -> None:
    """C21: docs/events.md lists every event type the runtime publishes, each with exactly its fields."""
    documented = documented_events()
    events = await every_event_type()
    assert {str(e["type"]) for e in events} == set(documented)
    for event in events:
        extra = set(event) - {"type", "sequence", "session_id", "time"}
        assert extra == documented[str(event["type"])], event
        json.dumps(event)


# -- the rules the docs cite (docs/rules.md) ------------------------------------------------------

_RULE = re.compile(r"\bC(\d+b?)\b")
_JARGON = re.compile(r"CONTRACT\.md|product contract|\bthe seed\b|\bseed's\b|\bseeds/", re.IGNORECASE)


def _shipped_text_files() -> list[Path]:
    """What a user reads: the package's sources, the docs, the examples and the README."""
    files = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "examples").glob("*.py")),
    ]
    files += sorted((ROOT / "src" / "live_steering").rglob("*.py"))
    return files


def test_every_rule_number_cited_is_explained_in_rules_md() -> None:
    """A rule number a page or docstring cites is one docs/rules.md says in a sentence."""
    rules_page = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    explained = set(re.findall(r"^\| C(\d+b?) \|", rules_page, flags=re.MULTILINE))
    assert {str(n) for n in range(1, 34)} <= explained
    cited = {
        f"{path.relative_to(ROOT)}: C{number}"
        for path in _shipped_text_files()
        for number in _RULE.findall(path.read_text(encoding="utf-8"))
        if number not in explained
    }
    assert cited == set()


def test_no_page_names_a_document_that_is_not_in_the_repository() -> None:
    """No "seed" jargon and no CONTRACT.md: a reader cannot open either; docs/rules.md says the rules."""
    named = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _shipped_text_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if _JARGON.search(line)
    ]
    assert named == []


@pytest.mark.parametrize(
    "module",
    [
        "live_steering._types",
        "live_steering._validate",
        "live_steering._admission",
        "live_steering._core",
        "live_steering._runtime",
    ],
)
def test_docstring_examples_run(module: str) -> None:
    """The ``>>>`` examples of the core modules run as written (doctest); the ones that need a
    running loop say ``+SKIP``."""
    import doctest
    import importlib

    results = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert results.failed == 0
