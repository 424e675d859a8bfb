"""Misuse errors name the public API the caller used, never an internal method."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from live_steering import GenerationStateError, Input, LiveRuntime

pytestmark = pytest.mark.anyio


async def test_continue_after_checkpoint_inside_a_boundary_names_itself() -> None:
    """Calling ``continue_after_checkpoint()`` while a boundary runs raises a GenerationStateError
    that names ``continue_after_checkpoint``, not the core's ``after_checkpoint``."""
    runtime = LiveRuntime()
    raised: list[GenerationStateError] = []
    async with runtime, runtime.open_generation("g1") as gen:

        async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
            with pytest.raises(GenerationStateError) as caught:
                gen.continue_after_checkpoint()
            raised.append(caught.value)

        await runtime.submit_steering(Input("steer", "x", id="a"), gen.id)
        await gen.boundary(writer)
        gen.stop()
    (error,) = raised
    assert str(error).startswith("continue_after_checkpoint() while a boundary is running")
