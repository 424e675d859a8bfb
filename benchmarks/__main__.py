"""``python -m benchmarks [--quick] [--json] [--backend NAME]``; see ``--help``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Sequence

from . import BACKENDS, FULL, GROUPS, QUICK, TINY, Figure, run
from ._busy import busy_machine
from ._margin import apply_margin


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"a fraction from 0 up to (not including) 1, not {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=(
            "Measure live_steering against floors taken in the same run, on asyncio and trio. "
            "Exit status: 0 when every figure is ok (ratio <= target, and with --margin that much "
            "room under it), 1 when any figure is not ok."
        ),
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer rounds; finishes in under 60 seconds")
    size.add_argument(
        "--tiny",
        action="store_true",
        help="two rounds and small counts, to test the machinery: its numbers mean nothing",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object {"figures": [...], "busy": HOGS} on stdout instead of a table',
    )
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="run the fleet group instead: remote submits, SQLite and PostgreSQL (benchmarks/bench_fleet.py)",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help=(
            "run the HTTP group instead: http_submit, http_events_fanout and hook_http "
            "(benchmarks/bench_http.py)"
        ),
    )
    parser.add_argument(
        "--dsn",
        metavar="DSN",
        help="with --fleet: the PostgreSQL to measure (default: a throwaway cluster, if installed)",
    )
    parser.add_argument(
        "--calls",
        action="store_true",
        help="print the calls one one-input boundary makes on each backend (counted, not timed) and exit",
    )
    parser.add_argument(
        "--busy",
        action="store_true",
        help="run beside a CPU hog on every other core (CI's real condition); the JSON says how many",
    )
    parser.add_argument(
        "--margin",
        metavar="FRACTION",
        type=_fraction,
        default=0.0,
        help="a figure is ok only with this much room under its target, e.g. 0.10: (target - ratio) / "
        "target, or for integration_overhead_* the overhead's room, (target - ratio) / (target - 1); "
        "every figure's room is printed (and in the JSON as 'room') either way",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        action="append",
        help="run only this backend (repeatable; default: both)",
    )
    parser.add_argument(
        "--group",
        choices=GROUPS,
        action="append",
        help="run only this group (repeatable; default: all): core (the runtime), acp "
        "(acp_steer_roundtrip over stdio, asyncio only, about 2 s more), integrations "
        "(integration_overhead_*, asyncio only) or hook "
        "(hook_command: it starts a few dozen processes)",
    )
    return parser


#: What each part of a run imports beyond ``pip install -e .``, by module: all of it comes with
#: the ``dev`` extra (README, Quickstart's second command). The integration figures are left out:
#: a framework that is not installed skips its figure and says so.
_NEEDS: dict[str, tuple[str, ...]] = {
    "trio": ("trio",),
    "acp": ("acp",),
    "http": ("httpx", "starlette"),
    "http-asyncio": ("uvicorn",),
    "http-trio": ("hypercorn",),
    "postgres": ("psycopg",),
}


def _parts(args: argparse.Namespace) -> list[str]:
    """The parts of ``_NEEDS`` this run imports, in ``main``'s order of what it runs."""
    from live_steering.testing._postgres import find_binaries

    backends = tuple(args.backend) if args.backend else BACKENDS
    on_trio = ["trio"] if "trio" in backends else []
    if args.calls:  # counts calls on each backend, then exits
        return on_trio
    if args.fleet:  # PostgreSQL on --dsn, or on a throwaway cluster when the server is installed
        return on_trio + (["postgres"] if args.dsn or find_binaries() is not None else [])
    if args.http:
        return on_trio + ["http"] + [f"http-{backend}" for backend in backends]
    groups = tuple(args.group) if args.group else GROUPS
    parts = on_trio if "core" in groups else []  # the other groups run on asyncio or in processes
    return parts + (["acp"] if "acp" in groups and "asyncio" in backends else [])


def _missing(args: argparse.Namespace) -> list[str]:
    """The modules this run needs that are not installed."""
    return [name for part in _parts(args) for name in _NEEDS[part] if importlib.util.find_spec(name) is None]


def _room(fig: Figure) -> str:
    return "" if fig.get("room") is None else f"{fig['room']:.0%}"


def _table(figures: Sequence[Figure], floors: dict[str, dict[str, float]]) -> str:
    lines = []
    for backend, values in floors.items():
        shown = ", ".join(f"{name} {value:,.0f} ns" for name, value in values.items())
        lines.append(f"floors on {backend}: {shown}")
    lines.append("")
    width = max([20, *(len(fig["name"]) for fig in figures)])  # integration_overhead_* names are long
    header = f"{'figure':<{width}} {'backend':<8} {'value':>12} {'floor':>12} {'ratio':>9} {'target':>8}"
    header += f" {'room':>6}  ok"
    lines.append(header)
    lines.append("-" * len(header))
    for fig in figures:
        lines.append(
            f"{fig['name']:<{width}} {fig['backend']:<8} {fig['value']:>12,.1f} {fig['floor']:>12,.1f} "
            f"{fig['ratio']:>9,.3f} {fig['target']:>8,g} {_room(fig):>6}  {'yes' if fig['ok'] else 'NO'}"
            + _note(fig)
        )
    return "\n".join(lines)


def _note(fig: Figure) -> str:
    """What a row reports beside its figure: a boundary figure's first ten of each batch."""
    if "first_ten" not in fig:
        return ""
    return f"  first ten {fig['first_ten']:,.1f} ns ({fig['first_ten'] / fig['floor']:.3f})"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    missing = _missing(args)
    if missing:
        print(
            f"benchmarks: this run needs {', '.join(missing)}, which the 'dev' extra installs: "
            ".venv/bin/pip install -e '.[dev]'",
            file=sys.stderr,
        )
        return 2
    if args.calls:
        from ._calls import table

        print(table(tuple(args.backend) if args.backend else BACKENDS))
        return 0
    if not args.busy:
        return _main(args, hogs=0)
    with busy_machine() as pids:
        print(f"benchmarks: beside {len(pids)} CPU hog(s), pids {pids}", file=sys.stderr)
        return _main(args, hogs=len(pids))


def _main(args: argparse.Namespace, hogs: int) -> int:
    settings = TINY if args.tiny else QUICK if args.quick else FULL
    backends = tuple(args.backend) if args.backend else BACKENDS
    started = time.monotonic()
    if args.fleet:
        from . import bench_fleet

        rows = bench_fleet.run(backends, dsn=args.dsn, quick=args.quick, tiny=args.tiny)
        apply_margin(rows, args.margin)
        elapsed = time.monotonic() - started
        if args.json:
            print(json.dumps({"fleet": rows, "busy": hogs}))
        else:
            print(bench_fleet.table(rows))
            print(f"\n{len(rows)} fleet figures in {elapsed:.1f} s")
        print(f"benchmarks: {elapsed:.1f} s", file=sys.stderr)
        return 0 if all(row["ok"] for row in rows) else 1
    if args.http:
        from . import bench_http

        rows = bench_http.run(backends, quick=args.quick, tiny=args.tiny)
        apply_margin(rows, args.margin)
        elapsed = time.monotonic() - started
        if args.json:
            print(json.dumps({"http": rows}))
        else:
            print(bench_http.table(rows))
            print(f"\n{len(rows)} HTTP figures in {elapsed:.1f} s")
        print(f"benchmarks: {elapsed:.1f} s", file=sys.stderr)
        return 0 if all(row["ok"] for row in rows) else 1
    groups = tuple(args.group) if args.group else GROUPS
    figures, floors = run(settings, backends, groups)
    apply_margin(figures, args.margin)
    elapsed = time.monotonic() - started
    if args.json:
        print(json.dumps({"figures": figures, "busy": hogs}))
    else:
        print(_table(figures, floors))
        beside = f", beside {hogs} CPU hog(s)" if hogs else ""
        print(f"\n{len(figures)} figures in {elapsed:.1f} s{beside}")
    print(f"benchmarks: {elapsed:.1f} s", file=sys.stderr)
    return 0 if all(fig["ok"] for fig in figures) else 1


if __name__ == "__main__":
    raise SystemExit(main())
