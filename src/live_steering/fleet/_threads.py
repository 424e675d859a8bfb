"""Worker threads for the SQLite store's fsynced commits, cheaper to hand a call to than anyio's.

An owner's commit must wait for the disk (an fsync), so it runs off the event loop, and on
a remote submit's path that hand-off happens once per decision. ``anyio.to_thread.run_sync``
costs 110-130 us here for a call that does nothing (both backends: a checkpoint, the
thread limiter, a future and ``call_soon_threadsafe`` on asyncio; trio's thread cache and
token on trio); a thread blocked on a ``queue.SimpleQueue`` that answers through a
socket pair the caller awaits with ``anyio.wait_readable`` costs 58-85 us, most of it the
two wake-ups the kernel must make anyway (``benchmarks``: ``--fleet``, ``remote_submit``).

The pool keeps idle threads for ``IDLE_SECONDS`` (as anyio's does), each used by one call
at a time, and at most ``MAX_THREADS`` of them (two file descriptors each): beyond that, or
when the system refuses a new thread or socket pair, a call runs through
``anyio.to_thread.run_sync`` instead, so many owners committing at once never exhaust the
process's threads or descriptors. A call always runs to its end: cancelling the caller
waits for the thread and then re-raises (anyio's ``abandon_on_cancel=False``), and so does a
KeyboardInterrupt raised at the wait (trio delivers Ctrl-C at the main task's checkpoint;
``trio.to_thread`` defers it), so a connection is never left in use by a thread nobody
waits for.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

_T = TypeVar("_T")

#: How long an idle thread waits for its next call before it ends.
IDLE_SECONDS: Final = 10.0

#: Threads the pool keeps at most; calls beyond them go to anyio's threads. SQLite has one
#: writer per file, so more commits than this at once would mostly wait for each other.
MAX_THREADS: Final = 16

_Job = tuple[Callable[..., Any], tuple[Any, ...]]


class _Worker:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.done, self._signal = socket.socketpair()
        self.done.setblocking(False)
        self.outcome: tuple[bool, Any] = (False, None)
        self.thread = threading.Thread(target=self._serve, name="live-steering-commit", daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                function, args = self.jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                if _retire(self):
                    self.done.close()
                    self._signal.close()
                    return
                continue  # taken just now: its call is on the way
            try:
                self.outcome = (True, function(*args))
            except BaseException as exc:  # handed to the caller, raised there
                self.outcome = (False, exc)
            self._signal.send(b"\0")


_lock = threading.Lock()
_idle: list[_Worker] = []
_alive = 0  # alive, idle or busy


def _take() -> _Worker | None:
    """An idle worker, a new one, or ``None``: the pool is full or the system refused one."""
    global _alive
    with _lock:
        if _idle:
            return _idle.pop()
        if _alive >= MAX_THREADS:
            return None
        _alive += 1
    try:
        worker = _Worker()
        try:
            worker.thread.start()
        except BaseException:
            worker.done.close()
            worker._signal.close()
            raise
    except (OSError, RuntimeError):  # out of descriptors or threads: anyio's pool instead
        with _lock:
            _alive -= 1
        return None
    return worker


def _give_back(worker: _Worker) -> None:
    with _lock:
        _idle.append(worker)


def _retire(worker: _Worker) -> bool:
    """True if ``worker`` was idle and is now out of the pool (its thread ends)."""
    global _alive
    with _lock:
        if worker in _idle:
            _idle.remove(worker)
            _alive -= 1
            return True
        return False


def _forget_after_fork() -> None:
    # a forked child has none of its parent's threads: a call handed to one would never end
    global _lock, _alive
    _lock = threading.Lock()
    _idle.clear()
    _alive = 0


os.register_at_fork(after_in_child=_forget_after_fork)


def _wait_here(worker: _Worker) -> None:
    """Block until the call ends (the caller can no longer await: its coroutine is closing)."""
    worker.done.setblocking(True)
    try:
        worker.done.recv(1)
    finally:
        worker.done.setblocking(False)


async def run_sync(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` on a pooled thread; its result, or its exception raised here."""
    worker = _take()
    if worker is None:
        return await anyio.to_thread.run_sync(function, *args)
    interrupts = (anyio.get_cancelled_exc_class(), KeyboardInterrupt, SystemExit)
    worker.jobs.put((function, args))
    interrupted: BaseException | None = None
    while True:
        try:
            if interrupted is None:  # (a cancel scope costs a few us: only once one is needed)
                await anyio.wait_readable(worker.done)
            else:
                with anyio.CancelScope(shield=True):
                    await anyio.wait_readable(worker.done)
            worker.done.recv(1)
        except BlockingIOError:  # woken without the byte: wait again
            continue
        except interrupts as exc:  # cancelled, or Ctrl-C at trio's checkpoint: the call ends first
            if interrupted is None:
                interrupted = exc
            continue
        except BaseException:  # the wait itself cannot go on (GeneratorExit, its loop gone)
            _wait_here(worker)
            worker.outcome = (False, None)
            _give_back(worker)
            raise
        break
    ok, value = worker.outcome
    worker.outcome = (False, None)
    _give_back(worker)
    if interrupted is not None:
        raise interrupted
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]
