"""The live_steering benchmark suite: ``python -m benchmarks`` from the repository root.

Every figure is a ratio against a floor measured in the same process and run, so
that a shared, noisy machine changes both sides alike. See ``docs/performance.md``.
"""

from __future__ import annotations

from ._integrations import run_integrations
from ._suite import FULL, QUICK, TINY, Settings, run_backend
from ._timing import Figure, figure

__all__ = ["BACKENDS", "FULL", "QUICK", "TINY", "Figure", "Settings", "figure", "run", "run_backend"]

BACKENDS = ("asyncio", "trio")


def run(
    settings: Settings, backends: tuple[str, ...] = BACKENDS
) -> tuple[list[Figure], dict[str, dict[str, float]]]:
    """Run the suite on each backend; returns every figure and, per backend, the floors in ns."""
    figures: list[Figure] = []
    floors: dict[str, dict[str, float]] = {}
    for backend in backends:
        backend_figures, floors[backend] = run_backend(backend, settings)
        figures.extend(backend_figures)
    if "asyncio" in backends:  # the frameworks behind the integration figures are asyncio-only
        figures.extend(run_integrations(settings.integration_rounds))
    return figures, floors
