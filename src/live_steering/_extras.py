"""What to say when an optional extra is missing.

Each integration lives behind a pip extra (``acp``, ``postgres``, ...); importing it
without the extra raises one ``ImportError`` that names the command that fixes it.
This module imports nothing, so the CLI and the library can both use it without
pulling an optional dependency in.
"""

from __future__ import annotations

__all__ = ["install_hint"]


def install_hint(feature: str, extra: str, package: str) -> str:
    """The one line that tells a user how to install ``extra`` for ``feature``.

    >>> print(install_hint("live_steering.acp", "acp", "agent-client-protocol"))
    live_steering.acp needs the 'acp' extra: pip install 'live-steering[acp]' (or agent-client-protocol)
    """
    return f"{feature} needs the {extra!r} extra: pip install 'live-steering[{extra}]' (or {package})"
