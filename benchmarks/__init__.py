"""The live_steering benchmark suite: ``python -m benchmarks`` from the repository root.

Every figure is a ratio against a floor measured in the same process and run, so
that a shared, noisy machine changes both sides alike. See ``docs/performance.md``.
"""

from __future__ import annotations

from ._acp import ACP_FIGURES, run_acp
from ._integrations import run_integrations
from ._suite import FULL, QUICK, TINY, Settings, run_backend
from ._timing import Figure, figure
from .bench_hook import measure_hook_command, measure_instruct_command

__all__ = ["ACP_FIGURES", "BACKENDS", "FULL", "GROUPS", "QUICK", "TINY", "Figure", "Settings"]
__all__ += ["figure", "run", "run_backend"]

BACKENDS = ("asyncio", "trio")
#: ``core``: the runtime's figures on every backend; ``acp``: ``acp_steer_roundtrip`` (asyncio only);
#: ``integrations``: ``integration_overhead_*`` (asyncio only); ``hook``: ``hook_command``, measured
#: once with processes (``backend: "process"``).
GROUPS = ("core", "acp", "integrations", "hook")


def run(
    settings: Settings, backends: tuple[str, ...] = BACKENDS, groups: tuple[str, ...] = GROUPS
) -> tuple[list[Figure], dict[str, dict[str, float]]]:
    """Run the suite on each backend; returns every figure and, per backend, the floors in ns.

    The ``acp`` group runs once, on asyncio (the ACP SDK is asyncio-only), when
    asyncio is among ``backends``; its floor is inside its figure. ``hook_command``
    (``bench_hook.py``) starts processes and runs no event loop: it is measured once,
    after the backends, with ``backend: "process"``.
    """
    figures: list[Figure] = []
    floors: dict[str, dict[str, float]] = {}
    if "core" in groups:
        for backend in backends:
            backend_figures, floors[backend] = run_backend(backend, settings)
            figures.extend(backend_figures)
    if "acp" in groups and "asyncio" in backends:
        figures.extend(run_acp(settings.rounds))
    if "integrations" in groups and "asyncio" in backends:  # the frameworks are asyncio-only
        figures.extend(run_integrations(settings.integration_rounds))
    if "hook" in groups:
        figures.append(measure_hook_command(settings.hook_runs))
        figures.append(measure_instruct_command(settings.hook_runs))
    return figures, floors
