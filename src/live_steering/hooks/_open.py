"""Which store a relay command uses: a SQLite path, a PostgreSQL DSN, or the environment's.

On the hook command's path: the standard library only; psycopg (through ``_postgres``)
is imported only when a DSN is given.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ._sqlite import SqliteHookStore
from ._store import DEFAULT_BUSY_TIMEOUT, HookStore, StoreError

__all__ = ["DSN_ENV", "open_store"]

#: A PostgreSQL DSN: when set (and no ``--store``/``--dsn`` is given), the relay's store.
DSN_ENV = "LIVE_STEERING_STORE_DSN"


def open_store(
    path: str | os.PathLike[str] | None = None,
    *,
    dsn: str | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    trace: Callable[[str], None] | None = None,
) -> HookStore:
    """The store a command names: ``path`` (SQLite), else ``dsn`` (PostgreSQL), else the environment.

    With neither: ``$LIVE_STEERING_STORE_DSN`` if set, else the SQLite file at
    ``default_store_path()``. Giving both is a ``ValueError``. psycopg is imported
    only on the PostgreSQL path; without it, ``StoreError`` names the extra to install.
    """
    if path is not None and dsn is not None:
        raise ValueError("give a store path or a DSN, not both")
    if path is None and dsn is None:
        dsn = os.environ.get(DSN_ENV) or None
    if dsn is None:
        return SqliteHookStore(path, busy_timeout=busy_timeout, trace=trace)
    try:
        from ._postgres import PostgresHookStore
    except ImportError as exc:
        from .._extras import install_hint

        hint = install_hint("a PostgreSQL hook store (--dsn)", "postgres", "psycopg[binary]")
        raise StoreError(f"{hint} ({exc})") from exc
    return PostgresHookStore(dsn, busy_timeout=busy_timeout, trace=trace)
