"""``live_steering.http``: the HTTP API and web console over the fleet and hook stores (C32).

``create_app(fleet=..., hooks_store=..., token=...)`` returns an ASGI application: run it
under any ASGI server (``live-steering serve`` runs it under uvicorn, or hypercorn on
trio), or mount it in your own Starlette or FastAPI app
(``Mount("/steering", app=create_app(...))``). Routes, status codes and the security
rules are in docs/http.md. Needs the ``http`` extra (Starlette).

>>> async with SQLiteFleet("fleet.db") as fleet:                           # doctest: +SKIP
...     app = create_app(fleet=fleet, token=os.environ["LIVE_STEERING_TOKEN"])
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401  (the extra's marker: a clear message instead of a deep ImportError)
except ImportError as exc:  # pragma: no cover - depends on the environment
    from .._extras import install_hint

    raise ImportError(install_hint("live_steering.http", "http", "starlette")) from exc

from ._app import STATUS_OF_REASON, STATUS_OF_STOP, create_app

__all__ = ["create_app", "STATUS_OF_REASON", "STATUS_OF_STOP"]
