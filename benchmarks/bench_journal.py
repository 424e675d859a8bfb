"""Journaled submits: group commit against one commit per change, in the same run.

    python benchmarks/bench_journal.py [--steers 1000] [--hosts 50] [--backend asyncio]

``--hosts`` concurrent host tasks each submit their share of ``--steers`` steers,
one at a time, and wait until each queued receipt is durable before the next
(what a host does before acknowledging a user). An engine task drains them at
request boundaries, so every steer costs three journaled changes (accepted,
write-ahead mark, applied). The same workload runs three times: without a
journal (baseline), with group commit (the default) and with ``max_batch=1``
(one transaction, one fsync, per change). It prints each and the ratio.
Files go to a temporary directory on the same filesystem as ``--dir``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from live_steering import Disposition, Input, LiveRuntime
from live_steering.journal import ReceiptJournal


async def _workload(runtime: LiveRuntime, journal: ReceiptJournal | None, steers: int, hosts: int) -> None:
    async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
        await anyio.lowlevel.checkpoint()

    async with runtime.open_generation("bench") as gen:
        done = anyio.Event()

        async def host(h: int) -> None:
            for n in range(h, steers, hosts):
                receipt = await runtime.submit_steering(Input("steer", f"steer {n}", id=f"s{n}"), gen.id)
                assert receipt.disposition is Disposition.QUEUED
                if journal is not None:
                    await journal.wait_durable(receipt.input_id)

        async def engine() -> None:
            applied = 0
            while applied < steers:
                await gen.wait_for_input()
                applied += len(await gen.boundary(writer))
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(engine)
            for h in range(hosts):
                tg.start_soon(host, h)
        await done.wait()
        gen.stop()
    if journal is not None:
        await journal.flush()


async def _measure(
    directory: Path, label: str, max_batch: int | None, steers: int, hosts: int
) -> dict[str, Any]:
    runtime = LiveRuntime(identity_limit=max(2_000, steers))
    started = time.perf_counter()
    if max_batch is None:
        await _workload(runtime, None, steers, hosts)
        commits = 0
    else:
        path = directory / f"{label}.db"
        async with ReceiptJournal(path, max_batch=max_batch) as journal:
            journal.attach(runtime)
            await _workload(runtime, journal, steers, hosts)
            stats = journal.statistics()
            commits = stats.commits
            assert stats.durable == stats.enqueued == 3 * steers
    seconds = time.perf_counter() - started
    assert runtime.statistics().applied == steers
    return {"label": label, "seconds": seconds, "commits": commits, "per_second": steers / seconds}


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        results = [
            await _measure(directory, "no journal", None, args.steers, args.hosts),
            await _measure(directory, "group commit", 4_096, args.steers, args.hosts),
            await _measure(directory, "commit per change", 1, args.steers, args.hosts),
        ]
    print(
        f"{args.steers} steers from {args.hosts} concurrent hosts, each waiting for durability; "
        f"backend {args.backend}; files under {args.dir or tempfile.gettempdir()}"
    )
    for r in results:
        rate = f"{r['per_second']:10.0f} steers/s"
        print(f"  {r['label']:<18} {r['seconds']:8.3f} s  {rate}  {r['commits']:6d} commits")
    group, single = results[1], results[2]
    print(f"group commit is {single['seconds'] / group['seconds']:.1f}x faster than one commit per change")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steers", type=int, default=1_000)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--dir", default=None, help="where to put the journal files (default: the temp dir)")
    args = parser.parse_args(argv)
    anyio.run(main_async, args, backend=args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
