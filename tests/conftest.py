"""Shared pytest fixtures: every async test runs on both anyio backends (STYLE.md)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``pytest.mark.anyio`` test once on asyncio and once on trio."""
    backend: str = request.param
    return backend
