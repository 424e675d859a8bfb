"""The live_steering benchmark suite: ``python -m benchmarks`` from the repository root.

Every figure is a ratio against a floor measured in the same process and run, so
that a shared, noisy machine changes both sides alike. See ``docs/performance.md``.
"""

from __future__ import annotations

from ._suite import FULL, QUICK, TINY, Settings, run_backend
from ._timing import Figure, figure
from .bench_hook import measure_hook_command

__all__ = ["BACKENDS", "FULL", "QUICK", "TINY", "Figure", "Settings", "figure", "run", "run_backend"]

BACKENDS = ("asyncio", "trio")


def run(
    settings: Settings, backends: tuple[str, ...] = BACKENDS, *, hook_command: bool = True
) -> tuple[list[Figure], dict[str, dict[str, float]]]:
    """Run the suite on each backend; returns every figure and, per backend, the floors in ns.

    ``hook_command`` (``bench_hook.py``) starts processes and runs no event loop: it is
    measured once, after the backends, with ``backend: "process"``.
    """
    figures: list[Figure] = []
    floors: dict[str, dict[str, float]] = {}
    for backend in backends:
        backend_figures, floors[backend] = run_backend(backend, settings)
        figures.extend(backend_figures)
    if hook_command:
        figures.append(measure_hook_command(settings.hook_runs))
    return figures, floors
