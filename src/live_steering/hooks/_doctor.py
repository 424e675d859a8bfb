"""``live-steering hooks doctor [VENDOR]``: is this vendor really wired to this installation?

A few checks, one line each, every one saying what to do when it fails: the vendor's config
file names ``live-steering hook VENDOR`` at the moments the installed version needs; the
command it names is this installation's; the store it names can be written; the installed
vendor version is one the version tables (``_versions.py``) verify; and for Codex, whether
Codex trusts the hooks (``hooks/list``, ``_codex.py``) and how to trust them; for an
``--http`` install, that its server answers and takes the hooks' token (``_server_check``).
Read-only but for the store check, which opens (and so creates) the store the hooks would use
(the server probe is refused by the route before it reads anything).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import unicodedata
import urllib.parse
from collections.abc import Iterator

from . import _install, _vendors, _versions

__all__ = ["Check", "config_path", "diagnose"]


class Check:
    """One line of the report: ``ok`` (or not), what was checked, and what to do."""

    __slots__ = ("detail", "ok", "title")

    def __init__(self, ok: bool | None, title: str, detail: str) -> None:
        self.ok = ok
        """True: fine; False: a problem; None: could not be checked (not a failure by itself)."""
        self.title = title
        self.detail = detail

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "--  "}[self.ok]
        return f"{mark}  {self.title}: {self.detail}"


def config_path(vendor: str) -> str:
    """The user-level config file the vendor reads hooks from (``$CLAUDE_CONFIG_DIR``,
    ``$CODEX_HOME``, ``$HERMES_HOME`` honoured).

    Claude Code reads ``$CLAUDE_CONFIG_DIR/settings.json`` when the variable is set (its CLI:
    ``(process.env.CLAUDE_CONFIG_DIR ?? path.join(os.homedir(), ".claude")).normalize("NFC")``
    is the user settings' folder), else ``~/.claude/settings.json``.
    """
    if vendor == "claude-code" and os.environ.get("CLAUDE_CONFIG_DIR"):
        return os.path.join(unicodedata.normalize("NFC", os.environ["CLAUDE_CONFIG_DIR"]), "settings.json")
    if vendor == "codex" and os.environ.get("CODEX_HOME"):
        return os.path.join(os.environ["CODEX_HOME"], "hooks.json")
    if vendor == "hermes":
        return os.path.join(_install.hermes_home(), "config.yaml")
    return os.path.expanduser(_install.CONFIG_FILES[vendor])


#: ``Authorization: Bearer ${VAR}`` in an HTTP hook's headers (``$VAR`` too): the variable named.
_BEARER_VAR = re.compile(r"\s*Bearer\s+\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))\s*")


def _token_env(hook: dict[str, object]) -> str | None:
    """The variable an HTTP hook's ``Authorization: Bearer ${VAR}`` header names, or ``None``."""
    headers = hook.get("headers")
    value = (
        next((v for k, v in headers.items() if k.lower() == "authorization"), None)
        if isinstance(headers, dict)
        else None
    )
    match = _BEARER_VAR.fullmatch(value) if isinstance(value, str) else None
    return (match[1] or match[2]) if match else None


def _commands_json(
    config: object,
    urls: dict[str, list[str]] | None = None,
    probes: set[tuple[str, str | None]] | None = None,
) -> dict[str, list[str]]:
    """Moment -> our hook commands in a parsed JSON hooks config; our HTTP hooks' URLs go in
    ``urls``, and each with the variable its bearer header names (``None``: none) in ``probes``."""
    found: dict[str, list[str]] = {}
    hooks = config.get("hooks", {}) if isinstance(config, dict) else {}
    if not isinstance(hooks, dict):
        return found
    for moment, entries in hooks.items():
        for entry in entries if isinstance(entries, list) else []:
            inner = entry.get("hooks") if isinstance(entry, dict) and "hooks" in entry else [entry]
            for hook in inner if isinstance(inner, list) else []:
                command = hook.get("command") if isinstance(hook, dict) else None
                url = hook.get("url") if isinstance(hook, dict) and hook.get("type") == "http" else None
                if isinstance(command, str) and _install.runs_our_hook(command):
                    found.setdefault(moment, []).append(command)
                elif urls is not None and isinstance(url, str) and "/v1/hooks/" in url:
                    urls.setdefault(moment, []).append(url)
                    if probes is not None:
                        probes.add((url, _token_env(hook)))
    return found


DISABLE_ALL_HOOKS = _install.DISABLE_ALL_HOOKS


def _server_check(url: str, token_env: str | None = None) -> Check:
    """Whether the server an HTTP hook posts to takes it: something listens (a TCP connect,
    bounded), the hooks' ``$VAR`` is set, and an authenticated probe is not refused.

    The probe is the hook route's own: ``POST`` to the hook's URL with its bearer token and a
    body that is not JSON. ``live-steering serve`` checks the token first (401) and then the
    content type (415), before it reads the body or opens its store: a 415 says the token is
    taken, and nothing was recorded or changed."""
    parsed = urllib.parse.urlsplit(url)
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return Check(False, "server", f"{url} has no valid port: run `hooks install` again")
    host = parsed.hostname or ""
    try:
        with socket.create_connection((host, port), timeout=2):
            pass
    except OSError as exc:
        return Check(
            False,
            "server",
            f"nothing answers at {host}:{port} ({exc.strerror or exc}): start `live-steering serve "
            "--hooks-store PATH` there, or the vendor's HTTP hooks do nothing",
        )
    token = None
    if token_env is not None:
        token = os.environ.get(token_env, "")
        if not token:
            return Check(
                False,
                "server",
                f"the hooks send Authorization: Bearer ${{{token_env}}}, but ${token_env} is not set here: "
                f"every hook gets 401 from `serve --token-env`; set {token_env} to the server's token "
                "where the agent runs",
            )
    status, detail = _probe(parsed, host, port, token)
    if status == 401:
        fix = (
            f"set {token_env} to the token the server was started with (`serve --token-env`)"
            if token_env is not None
            else "install again with `--http URL --token-env VAR`, VAR holding the server's token"
        )
        sent = f"the token in ${token_env}" if token_env is not None else "a hook without a token"
        return Check(False, "server", f"{url} refuses {sent} (401): every hook is refused; {fix}")
    if status in (404, 421):
        return Check(
            False,
            "server",
            f"{url} answers {status} ({detail}): no hook is taken there; start `live-steering serve "
            "--hooks-store PATH` at the hooks' URL (and a --token-env for a non-loopback name)",
        )
    if status != 415:
        return Check(
            None,
            "server",
            f"{host}:{port} accepts connections but does not answer as `live-steering serve` ({detail}); "
            "cannot tell whether it takes the hooks",
        )
    taken = f" and takes the token in ${token_env}" if token_env is not None else ""
    return Check(
        True,
        "server",
        f"{host}:{port} answers the hook route{taken} (the server's store is the one it serves)",
    )


def _probe(
    parsed: urllib.parse.SplitResult, host: str, port: int, token: str | None
) -> tuple[int | None, str]:
    """The status (``None``: no HTTP answer) and a few words, for ``_server_check``'s probe."""
    import http.client

    connection: http.client.HTTPConnection
    if parsed.scheme == "https":
        connection = http.client.HTTPSConnection(host, port, timeout=2)
    else:
        connection = http.client.HTTPConnection(host, port, timeout=2)
    headers = {"Content-Type": "text/plain", "Content-Length": "0"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    path = parsed.path + (f"?{parsed.query}" if parsed.query else "")
    try:
        connection.request("POST", path or "/", body=b"", headers=headers)
        response = connection.getresponse()
        return response.status, f"{response.status} {response.reason}".strip()
    except (OSError, http.client.HTTPException) as exc:
        return None, f"no HTTP answer: {exc.__class__.__name__}: {exc}"
    finally:
        connection.close()


def _commands_hermes(text: str) -> dict[str, list[str]]:
    """Moment -> our hook commands in Hermes's ``config.yaml`` (the lines ``config_block`` writes,
    at the indentation of the file's ``hooks:`` section, a comment after them or not)."""
    found: dict[str, list[str]] = {}
    moment = None
    in_hooks = False
    indent: int | None = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            in_hooks = line.startswith("hooks:")
            moment, indent = None, None
            continue
        stripped = line.strip()
        if not in_hooks or not stripped or stripped.startswith("#"):
            continue
        lead = len(line) - len(line.lstrip(" "))
        if indent is None:
            indent = lead
        if lead == indent:
            match = re.fullmatch(r"([a-z_]+):(?:\s+#.*)?", stripped)
            moment = match[1] if match else None
        elif (match := re.fullmatch(r'- command: (".*")(?:\s+#[^"]*)?', stripped)) and moment is not None:
            try:
                command = json.loads(match[1])
            except ValueError:
                continue
            if _install.runs_our_hook(command):
                found.setdefault(moment, []).append(command)
    return found


def _hermes_plugin(path: str, text: str) -> Check | None:
    """The Hermes plugin route: our plugin beside ``config.yaml``, named under ``plugins: enabled:``."""
    init = os.path.join(os.path.dirname(path), "plugins", "live-steering", "__init__.py")
    if not os.path.isfile(init):
        return None
    block = re.search(r"^plugins:.*(?:\n[ \t]+.*)*", text, re.M)
    if block is None or not re.search(r"enabled:[\s\S]*live-steering", block[0]):
        return Check(
            False,
            "config",
            f"{init} is installed but not enabled: add live-steering to plugins: enabled: in {path}",
        )
    return Check(True, "config", f"the live-steering plugin ({init}) is enabled in {path}")


def _plugin_store(path: str) -> str | None:
    """The store baked into the Hermes plugin beside ``path`` (``HermesSteering('...')``), if any."""
    import ast

    init = os.path.join(os.path.dirname(path), "plugins", "live-steering", "__init__.py")
    try:
        with open(init, encoding="utf-8") as f:
            match = re.search(r"HermesSteering\((.*?)\)\.register", f.read())
        value = ast.literal_eval(match[1]) if match else None
    except (OSError, ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _store_of(command: str) -> tuple[str | None, str | None]:
    """The ``--store`` and ``--dsn`` a hook command names (``None``: the default)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None, None
    store = dsn = None
    for i, arg in enumerate(argv):
        if arg in ("--store", "--dsn") and i + 1 < len(argv):
            if arg == "--store":
                store = argv[i + 1]
            else:
                dsn = argv[i + 1]
        elif arg.startswith("--store="):
            store = arg.partition("=")[2]
        elif arg.startswith("--dsn="):
            dsn = arg.partition("=")[2]
    return store, dsn


def _resolves_here(command: str) -> Check:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return Check(False, "command", f"cannot be parsed ({exc})")
    ours = _install._script()
    head = argv[: len(ours)]
    program = argv[0] if argv else ""
    if head == ours:
        return Check(True, "command", f"{program} is this installation")
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        return Check(
            False, "command", f"{program} does not exist or is not executable: run `hooks install` again"
        )
    return Check(
        False,
        "command",
        f"{program} is another installation than this one ({ours[0]}): "
        "run `hooks install` again from this one",
    )


def _store_check(store: str | None, dsn: str | None) -> Check:
    from ._open import open_store

    where = dsn if dsn is not None else (store or "the default store")
    try:
        opened = open_store(store, dsn=dsn)
    except Exception as exc:
        return Check(False, "store", f"{where} cannot be opened: {exc}")
    try:
        path = getattr(opened, "path", None)
        if dsn is None and isinstance(path, str) and os.path.exists(path) and not os.access(path, os.W_OK):
            return Check(False, "store", f"{path} is not writable by this user")
        return Check(
            True, "store", f"{path if dsn is None else 'the PostgreSQL store'} opens and is writable"
        )
    finally:
        opened.close()


def _codex_trust(wired: dict[str, list[str]], path: str) -> Check:
    from ._codex import CodexError, hooks_list

    command = _versions.command_for("codex")
    if command is None:
        return Check(None, "trust", "codex is not on PATH; cannot ask it which hooks it trusts")
    try:
        hooks = hooks_list(command, env=dict(os.environ), cwd=os.getcwd())
    except CodexError as exc:
        return Check(None, "trust", str(exc))
    ours = [h for h in hooks if _install.runs_our_hook(str(h.get("command", "")))]
    if not ours:
        return Check(
            False, "trust", "codex lists none of our hooks (is the hooks feature on? `codex features list`)"
        )
    states = sorted({str(h.get("trustStatus")) for h in ours})
    if states == ["trusted"] or set(states) <= {"trusted", "managed"}:
        return Check(True, "trust", f"codex trusts all {len(ours)} of our hooks")
    untrusted = [str(h.get("eventName")) for h in ours if h.get("trustStatus") not in ("trusted", "managed")]
    return Check(
        False,
        "trust",
        f"{', '.join(states)}: codex will not run {', '.join(untrusted)} (and `codex exec` says nothing); "
        "start `codex`, answer 'Hooks need review' with 'Trust all and continue' (or use /hooks)",
    )


def diagnose(vendor: str, *, path: str | None = None) -> Iterator[Check]:
    """The checks for ``vendor`` (its user config file, or ``path``), in order."""
    path = path or config_path(vendor)
    version: _versions.Version | None = None
    how = "no version table for this vendor"
    if vendor in _versions.TABLES:
        version, how = _versions.detect(vendor)
    try:
        with open(path, encoding="utf-8-sig") as f:  # a BOM is read past, as the vendors do
            text = f.read()
    except OSError as exc:
        yield Check(
            False,
            "config",
            f"{path}: {exc.strerror or exc}; run `live-steering hooks install {vendor} --write {path}`",
        )
        text = None
    except UnicodeDecodeError:
        yield Check(
            False, "config", f"{path} is not UTF-8 text; save it as UTF-8 (no hook can be read from it)"
        )
        text = None
    wired: dict[str, list[str]] = {}
    urls: dict[str, list[str]] = {}
    probes: set[tuple[str, str | None]] = set()
    if text is not None:
        config: object = {}
        try:
            if vendor == "hermes":
                wired = _commands_hermes(text)
            else:
                config = _install.read_config(vendor, text) if text.strip() else {}
                wired = _commands_json(config, urls, probes)
        except ValueError as exc:
            yield Check(False, "config", f"{path} is not JSON ({exc})")
            config = None
        except RecursionError:
            yield Check(False, "config", f"{path} is JSON nested too deeply to read")
            config = None
        switch = DISABLE_ALL_HOOKS.get(vendor)
        http = bool(urls) and not wired
        if http:  # installed with --http: the vendor posts to a server, no command runs here
            wired = {m: [] for m in urls}
        want = _install.moments(vendor, version, http=http)
        missing = [m for m in want if m not in wired]
        extra = [m for m in wired if m not in want]
        unknown = [m for m in wired if m not in _vendors.FACTS[vendor].known_moments]
        row = _versions.wiring(vendor, version) if version is not None else None
        if row is not None and row.known is not None:  # Claude Code's warning dialog (issue 24)
            unknown += [m for m in wired if m not in row.known and m not in unknown]
        plugin = _hermes_plugin(path, text) if vendor == "hermes" and not wired else None
        if plugin is not None:
            yield plugin
        elif vendor != "hermes" and not wired and config is not None and not isinstance(config, dict):
            yield Check(
                False,
                "config",
                f"{path} holds no JSON object (hooks install merges only into one): "
                "fix it, or replace it with {}",
            )
        elif switch is not None and isinstance(config, dict) and config.get(switch) is True:
            yield Check(
                False,
                "config",
                f'{path} sets "{switch}": true: {_vendors.FACTS[vendor].title} runs no hook at all, '
                f"live-steering's included; remove the setting (or set it to false)",
            )
        elif not wired:
            yield Check(
                False,
                "config",
                f"{path} runs no live-steering hook; run `hooks install {vendor} --write {path}`",
            )
        elif missing or unknown:
            problems = []
            if missing:
                problems.append(f"missing {', '.join(missing)}")
            if unknown:
                problems.append(f"moments {vendor} does not have: {', '.join(unknown)}")
            yield Check(
                False, "config", f"{path}: {'; '.join(problems)}; run `hooks install {vendor} --write {path}`"
            )
        else:
            more = f" (and {', '.join(extra)}, more than needed)" if extra else ""
            yield Check(True, "config", f"{path} wires {', '.join(m for m in want)}{more}")
    commands = sorted({c for cs in wired.values() for c in cs})
    for command in commands:
        yield _resolves_here(command)
    for url, token_env in sorted(probes, key=lambda p: (p[0], p[1] or "")):
        yield _server_check(url, token_env)
    if not (urls and not commands):  # an --http install: the server opens its own store
        if not commands:
            yield Check(None, "command", "nothing wired to check")
        stores = sorted({_store_of(c) for c in commands}, key=str) or [(_plugin_store(path), None)]
        for store, dsn in stores:
            yield _store_check(store, dsn)
    if vendor in _versions.TABLES:
        support = _versions.support(vendor, version)
        verified = _versions.shown_versions(vendor)
        if version is None:
            yield Check(None, "version", f"{how}; verified: {verified}")
        elif support == "supported":
            yield Check(True, "version", f"{how} (verified: {verified})")
        else:
            where = "not a version verified" if support == "unverified" else f"{support} than the verified"
            yield Check(False, "version", f"{how}: {where} {verified}; moments may differ")
    else:
        yield Check(None, "version", how)
    if vendor == "codex" and wired:
        yield _codex_trust(wired, path)
