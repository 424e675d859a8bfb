"""``live-steering demo --backend trio`` without trio installed: one line naming the install, exit 2.

trio comes with the ``trio`` extra (and ``dev``), not with the plain install of README's
Quickstart; anyio alone would fail with a ``LookupError`` traceback.
"""

from __future__ import annotations

import sys

import pytest

from live_steering._cli import main

EXPECTED = (
    "live-steering demo: --backend trio needs trio: pip install 'live-steering[trio]' "
    "(in a checkout: .venv/bin/pip install -e '.[trio]')\n"
)


@pytest.mark.parametrize("argv", [["demo"], ["demo", "--json"], ["demo", "--fleet"]], ids=" ".join)
def test_backend_trio_without_trio_names_the_install(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With trio missing (None in sys.modules fails its import), the demo says how to install it."""
    monkeypatch.setitem(sys.modules, "trio", None)
    assert main([*argv, "--backend", "trio"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing ran
    assert err == EXPECTED


def test_backend_asyncio_needs_no_trio(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default backend runs the demo with trio missing: only ``--backend trio`` asks for it."""
    monkeypatch.setitem(sys.modules, "trio", None)
    assert main(["demo", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines()[0].startswith("{")
