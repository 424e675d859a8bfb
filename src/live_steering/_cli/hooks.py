"""``live-steering hooks ...``: watch the audit stream, wire (and unwire) a vendor, recover.

* ``hooks events [--session S] [--follow] [--json] [--show-text]``: the store's
  audit events, oldest first; ``--follow`` keeps printing new ones until interrupted
  (before any hook made the default store, it waits for the store).
  Instruction text reads ``[redacted]`` unless ``--show-text``.
* ``hooks install VENDOR [--write PATH]``: print the vendor's hook config (every
  eligible moment plus its session-end moment), with ``--store`` (or ``--dsn``) baked in;
  ``--write`` merges it into PATH (the user's other hooks stay; the first backup goes to
  ``PATH.bak``, later ones to ``PATH.bak.1``, ...; an unchanged file is left alone).
* ``hooks uninstall VENDOR [--config PATH] [--plugin [DIR]]``: take our entries out of the
  vendor's config (the user's hooks stay; backup as ``install --write``), or remove the Hermes
  plugin ``install --plugin`` wrote.
* ``hooks doctor [VENDOR] [--config PATH]``: is the vendor wired to this installation (config,
  command, store, version, Codex's trust; an ``--http`` install's server and token)? Exit 1
  when a check fails.
* ``hooks sessions [--json]``: the sessions the store has seen (the ids to instruct).
* ``hooks recover [--session S]``: finalise ``unknown`` what dead hook processes left
  ``delivering``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# ``typing`` and ``datetime`` cost ``instruct`` (which imports ``store_options`` from here)
# a few milliseconds each: imported for the type checker, or where used.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

VENDORS = ("claude-code", "codex", "qwen-code", "vscode", "hermes")
FOLLOW_INTERVAL = 0.25
#: ``--write`` without PATH: the vendor's documented user config file (``_install.CONFIG_FILES``).
DEFAULT_PATH = "(the vendor's user config)"
PAGE = 1_000


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "hooks",
        help="the hook relay: watch its audit events, install a vendor's hook config, recover",
        description="The hook relay's audit stream, vendor configuration and recovery.",
    )
    commands = parser.add_subparsers(dest="hooks_command", metavar="COMMAND", required=True)

    events = commands.add_parser("events", help="print the audit events of the store")
    events.add_argument("--session", metavar="S", help="only events of session S")
    events.add_argument("--follow", action="store_true", help="keep printing new events until interrupted")
    events.add_argument("--json", action="store_true", help="one JSON object per event")
    events.add_argument(
        "--show-text", action="store_true", help="show instruction text instead of [redacted]"
    )
    events.add_argument(
        "--after", metavar="N", type=_sequence, default=0, help="only events with sequence > N"
    )
    events.add_argument(
        "--limit",
        metavar="N",
        type=int,
        default=None,
        help="print at most N events and say how many were left out (default: all, read in pages)",
    )
    store_options(events)
    events.set_defaults(handler=run_events)

    install = commands.add_parser("install", help="print (or --write) a vendor's hook config")
    install.add_argument("vendor", metavar="VENDOR", choices=VENDORS, help=f"one of {', '.join(VENDORS)}")
    install.add_argument(
        "--write",
        metavar="PATH",
        nargs="?",
        const=DEFAULT_PATH,
        type=_write_path,
        help="merge the config into PATH (default: the vendor's user config file; backup in "
        "PATH.bak, or PATH.bak.N if that exists)",
    )
    install.add_argument(
        "--http",
        metavar="URL",
        help="claude-code, qwen-code: HTTP hooks to the `live-steering serve` server at URL "
        "(its /v1/hooks/VENDOR route) instead of command hooks",
    )
    install.add_argument(
        "--token-env",
        metavar="VAR",
        help="with --http: the environment variable holding the server's token (as `serve "
        "--token-env VAR`); each HTTP hook sends Authorization: Bearer ${VAR}",
    )
    install.add_argument(
        "--client",
        metavar="PATH",
        help="the vendor's CLI to ask for its version (default: the vendor's command on PATH, or "
        "$LIVE_STEERING_CLAUDE / _CODEX / _QWEN / _HERMES)",
    )
    install.add_argument(
        "--vendor-version",
        "--client-version",
        dest="vendor_version",
        metavar="X.Y.Z",
        help="wire for this version of the vendor's CLI instead of the installed one (`VENDOR --version`)",
    )
    install.add_argument(
        "--profile",
        metavar="NAME",
        help="hermes --plugin only: install into that Hermes profile (as `hermes -p NAME`)",
    )
    install.add_argument(
        "--plugin",
        metavar="DIR",
        nargs="?",
        const="",
        help="hermes only: write the Hermes plugin into DIR "
        "(default $HERMES_HOME/plugins/live-steering, HERMES_HOME defaulting to ~/.hermes)",
    )
    store_options(install)
    install.set_defaults(handler=run_install)

    uninstall = commands.add_parser(
        "uninstall", help="take a vendor's live-steering hooks out of its config (yours stay)"
    )
    uninstall.add_argument("vendor", metavar="VENDOR", choices=VENDORS, help=f"one of {', '.join(VENDORS)}")
    uninstall.add_argument(
        "--config",
        metavar="PATH",
        type=_write_path,
        help="the config file to take them out of (default: the vendor's user config file, as "
        "`install --write` writes; backup in PATH.bak, or PATH.bak.N if that exists)",
    )
    uninstall.add_argument(
        "--plugin",
        metavar="DIR",
        nargs="?",
        const="",
        help="hermes only: remove the Hermes plugin `install --plugin` wrote into DIR "
        "(default $HERMES_HOME/plugins/live-steering)",
    )
    uninstall.add_argument(
        "--profile", metavar="NAME", help="hermes --plugin only: the Hermes profile (as `hermes -p NAME`)"
    )
    uninstall.set_defaults(handler=run_uninstall)

    doctor = commands.add_parser(
        "doctor", help="check that a vendor's hooks are wired to this installation and can run"
    )
    doctor.add_argument(
        "vendor", metavar="VENDOR", nargs="?", choices=VENDORS, help="one of " + ", ".join(VENDORS)
    )
    doctor.add_argument(
        "--config", metavar="PATH", help="the vendor config file to check (default: its user config)"
    )
    doctor.set_defaults(handler=run_doctor)

    sessions = commands.add_parser("sessions", help="list the sessions the store knows (ids to instruct)")
    sessions.add_argument("--json", action="store_true", help="one JSON object per session")
    store_options(sessions)
    sessions.set_defaults(handler=run_sessions)

    recover = commands.add_parser("recover", help="finalise unknown what dead hook processes left delivering")
    recover.add_argument("--session", metavar="S", help="only session S")
    recover.add_argument("--json", action="store_true", help="print the finalised command ids as JSON")
    store_options(recover)
    recover.set_defaults(handler=run_recover)


def store_options(parser: argparse.ArgumentParser) -> None:
    """``--store PATH`` or ``--dsn DSN`` (one of them), shared by every relay command."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--store",
        metavar="PATH",
        help=(
            "the hook store (default: $LIVE_STEERING_STORE_DSN if set, else $LIVE_STEERING_STORE, else XDG)"
        ),
    )
    where.add_argument(
        "--dsn",
        metavar="DSN",
        type=_dsn,
        help="a PostgreSQL hook store (default: $LIVE_STEERING_STORE_DSN; needs the 'postgres' extra)",
    )


def _write_path(text: str) -> str:
    """``--write PATH``: a file path, not an empty one (which would name the current folder)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file (leave PATH out for the vendor's own)")
    return text


def _dsn(text: str) -> str:
    """``--dsn``: non-empty and valid UTF-8 (``_output.dsn``'s rule, without its imports: ``instruct``
    starts with these options and keeps its imports few)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("the DSN is not valid UTF-8") from None
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty DSN names no server")
    return text


def _printable(value: object) -> str:
    text = str(value)
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _line(event: dict[str, Any]) -> str:
    import datetime

    when = datetime.datetime.fromtimestamp(float(event["time"]), tz=datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )
    skip = {"type", "sequence", "session_id", "time", "command_id", "cause"}
    rest = " ".join(
        f"{k}={_printable(json.dumps(v, ensure_ascii=False))}" for k, v in event.items() if k not in skip
    )
    parts = [
        f"{event['sequence']:>6}",
        when[:-4] + "Z",
        str(event["type"]),
        _printable(event.get("session_id") or "-"),
    ]
    parts.append(_printable(event.get("command_id") or "-"))
    return "  ".join(parts) + (f"  {rest}" if rest else "")


def _sequence(text: str) -> int:
    """An event sequence number for ``--after``: 0 up to SQLite's largest integer."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be an event sequence number (0 or more), got {text!r}")
    return value


#: What ``_inspected`` answers for the default store when no hook has made it yet.
NO_STORE_YET = ""


def _session_problem(args: argparse.Namespace, command: str) -> bool:
    """A ``--session`` outside the id rules: a usage error (one line; the caller exits 2), as
    ``instruct`` and ``receipts`` answer such an id. True when it printed one."""
    from ..hooks._vendors import session_id_problem

    session = getattr(args, "session", None)
    if session is None or (problem := session_id_problem(session)) is None:
        return False
    print(f"live-steering hooks {command}: --session: {problem}", file=sys.stderr)
    return True


def _inspected(args: argparse.Namespace) -> str | None:
    """Why an inspecting command (events, sessions, recover) does not open its store, or ``None``.

    They never create one: a ``--store`` (or ``$LIVE_STEERING_STORE``) that does not exist is
    said to be missing, so a mistyped path is not answered with an empty listing; the default
    store not made yet (no hook has run on this machine) is ``NO_STORE_YET``, which each
    command answers as an empty store (``events --follow`` waits for it).
    """
    from ..hooks._open import DSN_ENV
    from ..hooks._store import STORE_ENV, default_store_path

    if args.dsn is not None or (args.store is None and os.environ.get(DSN_ENV)):
        return None
    path = args.store if args.store is not None else default_store_path()
    if not os.path.exists(path):
        if args.store is None and not os.environ.get(STORE_ENV):
            return NO_STORE_YET
        shown = path if path.isprintable() else ascii(path)
        return f"no hook store at {shown}: no hook or instruct has run with it (a typo in the path?)"
    return None


def _store_made(args: argparse.Namespace) -> bool:
    """``events --follow`` before any hook made the default store: wait for it (polling, as the
    follow loop reads), then follow it. False when interrupted first."""
    try:
        while _inspected(args) == NO_STORE_YET:
            time.sleep(FOLLOW_INTERVAL)
    except KeyboardInterrupt:
        return False
    return True


def run_events(args: argparse.Namespace) -> int:
    from ..hooks._open import open_store
    from ..hooks._store import StoreError

    if args.limit is not None and (args.limit < 1 or args.follow):
        print("live-steering hooks events: --limit takes N >= 1, without --follow", file=sys.stderr)
        return 2
    if _session_problem(args, "events"):
        return 2
    if (problem := _inspected(args)) is not None:
        if problem == NO_STORE_YET and not args.follow:
            return 0  # no hook has run here yet: no events
        if problem == NO_STORE_YET:
            if not _store_made(args):
                return 0  # interrupted before the first hook or instruct made it
            problem = _inspected(args)
        if problem is not None:
            print(f"live-steering hooks events: {problem}", file=sys.stderr)
            return 1
    try:
        store = open_store(args.store, dsn=args.dsn)
    except StoreError as exc:
        print(f"live-steering hooks events: {exc}", file=sys.stderr)
        return 2
    after = args.after
    printed = 0
    try:
        while True:
            page = PAGE if args.limit is None else min(PAGE, args.limit - printed)
            batch = store.events(after=after, session_id=args.session, show_text=args.show_text, limit=page)
            for event in batch:
                print(json.dumps(event) if args.json else _line(event))
                after = int(event["sequence"])  # type: ignore[call-overload]
            printed += len(batch)
            sys.stdout.flush()
            if args.limit is not None and printed >= args.limit:
                left, cursor = 0, after
                while rest := store.events(after=cursor, session_id=args.session, limit=PAGE):
                    left += len(rest)
                    cursor = int(rest[-1]["sequence"])  # type: ignore[call-overload]
                if left:
                    print(
                        f"live-steering hooks events: {left} more event(s) left out by --limit "
                        f"{args.limit}; continue with --after {after}",
                        file=sys.stderr,
                    )
                return 0
            if len(batch) == page:
                continue  # a full page: read the next one now
            if not args.follow:
                return 0
            if not batch:
                time.sleep(FOLLOW_INTERVAL)
    except KeyboardInterrupt:
        return 0
    finally:
        store.close()


def _wiring_for(args: argparse.Namespace) -> tuple[Any, list[str]] | None:
    """The vendor version to wire for and the notes to print, or ``None`` after a usage error."""
    from ..hooks import _install, _versions

    notes: list[str] = []
    if args.vendor not in _versions.TABLES:
        if args.vendor_version is not None:
            notes.append(f"{args.vendor} has no version table; --vendor-version is ignored")
        return None, notes
    if args.vendor_version is not None:
        version = _versions.parse_version(args.vendor_version)
        if version is None:
            print(
                f"live-steering hooks install: --vendor-version {args.vendor_version!r} is not X.Y.Z",
                file=sys.stderr,
            )
            return None
        how = f"--vendor-version {args.vendor_version}"
    else:
        version, how = _versions.detect(args.vendor, args.client)
        if version is None and args.client is not None:  # a binary the user named: no guessing
            print(f"live-steering hooks install: {how}", file=sys.stderr)
            return None
    row = _versions.wiring(args.vendor, version)
    assert row is not None
    skipped = _install.NO_HTTP_MOMENTS.get(args.vendor, frozenset()) if args.http else frozenset()
    notes.append(_versions.install_note(args.vendor, version, how, skipped))
    if skipped & set(row.moments):
        gone = ", ".join(m for m in row.moments if m in skipped)
        notes.append(
            f"not {gone}: {args.vendor} runs no HTTP hook there, so an instruction queued before a"
            " session starts (or resumes) waits for its first prompt"
        )
    if row.trust_required:
        notes += CODEX_TRUST_STEP
    return version, notes


#: What a Codex user must do before any hook runs (Codex 0.171.0, see hooks/_codex.py).
CODEX_TRUST_STEP = [
    "Codex runs these hooks only once you trust them: start `codex` in a terminal and answer",
    "  'Hooks need review' with 'Trust all and continue' (or review them in /hooks). Until then",
    "  `codex exec` skips them without a word. Rewriting them (a new --store) asks again;",
    "  `live-steering hooks doctor codex` says whether they are trusted.",
]


def run_install(args: argparse.Namespace) -> int:
    from ..hooks._install import (
        InstallError,
        config_block,
        hermes_plugin_dir,
        merge_into,
        write_hermes_plugin,
    )
    from ..hooks._sqlite import store_path_problem

    problem = None if args.store is None else store_path_problem(args.store)
    if problem is not None:
        print(f"live-steering hooks install: --store {args.store!r}: {problem}", file=sys.stderr)
        return 2
    if args.dsn is not None and args.plugin is not None:
        print(
            "live-steering hooks install: --dsn is not baked into the Hermes plugin; use the "
            "config.yaml hooks (without --plugin) or $LIVE_STEERING_STORE_DSN",
            file=sys.stderr,
        )
        return 2
    if args.profile is not None and args.plugin is None:
        print("live-steering hooks install: --profile is for hermes --plugin only", file=sys.stderr)
        return 2
    if args.plugin is not None:
        if args.vendor != "hermes":
            print("live-steering hooks install: --plugin is for hermes only", file=sys.stderr)
            return 2
        if args.write is not None:
            print(
                "live-steering hooks install: --plugin DIR and --write PATH cannot be combined "
                "(the plugin goes into DIR; --write is for config.yaml shell hooks)",
                file=sys.stderr,
            )
            return 2
        try:
            directory = args.plugin or hermes_plugin_dir(args.profile)
            written = write_hermes_plugin(directory, args.store)
        except (OSError, ValueError) as exc:
            print(f"live-steering hooks install: {exc}", file=sys.stderr)
            return 1
        for path in written:
            print(f"wrote {path}")
        if not written:
            print(f"the plugin in {directory} is already up to date; nothing was changed")
        parent = os.path.dirname(os.path.abspath(os.path.expanduser(directory)))
        if os.path.basename(parent) == "plugins":  # <Hermes home>/plugins/NAME: that home's config
            config = os.path.join(os.path.dirname(parent), "config.yaml")
            print(f"enable it in {config}:  plugins: {{enabled: [live-steering]}}")
        else:  # a folder of the user's choosing: no Hermes home to name
            print(
                "enable it in the config.yaml of the Hermes home whose plugins/ folder holds it:  "
                "plugins: {enabled: [live-steering]}"
            )
        return 0
    from ..hooks._install import HTTP_VENDORS

    if args.http is not None and args.vendor not in HTTP_VENDORS:
        print(
            f"live-steering hooks install: {args.vendor} has no HTTP hooks; --http is for "
            f"{' and '.join(HTTP_VENDORS)}",
            file=sys.stderr,
        )
        return 2
    if args.http is not None and not args.http.startswith(("http://", "https://")):
        print(
            f"live-steering hooks install: --http wants an http:// or https:// URL, not {args.http!r}",
            file=sys.stderr,
        )
        return 2
    if args.token_env is not None and (args.http is None or not args.token_env.isidentifier()):
        wrong = "is for --http hooks" if args.http is None else "wants an environment variable name"
        print(f"live-steering hooks install: --token-env {wrong}", file=sys.stderr)
        return 2
    wiring = _wiring_for(args)
    if wiring is None:
        return 2
    version, notes = wiring
    block = config_block(
        args.vendor, args.store, args.dsn, version=version, http=args.http, token_env=args.token_env
    )
    if args.write is None:
        sys.stdout.write(block if isinstance(block, str) else json.dumps(block, indent=2) + "\n")
        for note in notes:
            print(note, file=sys.stderr)
        return 0
    if args.write == DEFAULT_PATH:
        from ..hooks._doctor import config_path  # $CODEX_HOME, $HERMES_HOME, as doctor reads

        args.write = config_path(args.vendor)
    try:
        merged = merge_into(
            args.write,
            args.vendor,
            args.store,
            args.dsn,
            version=version,
            http=args.http,
            token_env=args.token_env,
        )
    except (InstallError, OSError) as exc:
        print(f"live-steering hooks install: {exc}", file=sys.stderr)
        return 1
    if not merged.changed:
        print(f"{args.write} already has these {args.vendor} hooks; nothing was changed")
    else:
        same = merged.path == os.path.abspath(args.write)
        where = args.write if same else f"{args.write} (-> {merged.path})"
        saved = f"; the previous file is in {merged.backup}" if merged.backup else ""
        print(f"wrote the {args.vendor} hooks into {where}{saved}")
    for note in notes:
        print(note)
    if merged.disabled_by is not None:  # written, and still off: say so where a person looks
        print(
            f'live-steering hooks install: warning: {args.write} sets "{merged.disabled_by}": true, '
            "so none of these hooks runs; remove the setting (or set it to false)",
            file=sys.stderr,
        )
    return 0


def run_uninstall(args: argparse.Namespace) -> int:
    from ..hooks._install import InstallError, hermes_plugin_dir, remove_from, remove_hermes_plugin

    if args.plugin is not None and args.vendor != "hermes":
        print("live-steering hooks uninstall: --plugin is for hermes only", file=sys.stderr)
        return 2
    if args.profile is not None and args.plugin is None:
        print("live-steering hooks uninstall: --profile is for hermes --plugin only", file=sys.stderr)
        return 2
    if args.plugin is not None:
        if args.config is not None:
            print(
                "live-steering hooks uninstall: --plugin DIR and --config PATH cannot be combined "
                "(run it once for each)",
                file=sys.stderr,
            )
            return 2
        try:
            directory = args.plugin or hermes_plugin_dir(args.profile)
            removed = remove_hermes_plugin(directory)
        except (InstallError, OSError, ValueError) as exc:
            print(f"live-steering hooks uninstall: {exc}", file=sys.stderr)
            return 1
        if not removed:
            print(f"no live-steering plugin in {directory}; nothing was changed")
            return 0
        for path in removed:
            print(f"removed {path}")
        print("take live-steering out of `plugins: enabled:` in that Hermes home's config.yaml too")
        return 0
    if args.config is None:
        from ..hooks._doctor import config_path  # $CLAUDE_CONFIG_DIR, $CODEX_HOME, $HERMES_HOME

        args.config = config_path(args.vendor)
    try:
        merged = remove_from(args.config, args.vendor)
    except (InstallError, OSError) as exc:
        print(f"live-steering hooks uninstall: {exc}", file=sys.stderr)
        return 1
    if not merged.changed:
        if not os.path.exists(merged.path):
            print(f"there is no {args.config}; nothing to remove")
        else:
            print(f"{args.config} has no live-steering hooks; nothing was changed")
        return 0
    same = merged.path == os.path.abspath(args.config)
    where = args.config if same else f"{args.config} (-> {merged.path})"
    saved = f"; the previous file is in {merged.backup}" if merged.backup else ""
    print(f"removed the live-steering {args.vendor} hooks from {where}{saved}")
    print(
        "the hook store is left as it is (its receipts and audit events): delete it once no "
        "session needs it (docs/hooks.md, The store)"
    )
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    from ..hooks._doctor import config_path, diagnose

    if args.vendor is None:
        if args.config is not None:
            print("live-steering hooks doctor: --config needs a VENDOR", file=sys.stderr)
            return 2
        # every vendor whose user config exists; none: say so
        vendors = [v for v in VENDORS if v != "vscode" and os.path.exists(config_path(v))]
        if not vendors:
            checked = ", ".join(config_path(v) for v in VENDORS if v != "vscode")
            print(f"no vendor config found (checked {checked})")
            return 1
    else:
        vendors = [args.vendor]
    failed = False
    for vendor in vendors:
        print(f"{vendor}:")
        for check in diagnose(vendor, path=args.config):
            print("  " + check.line())
            failed = failed or check.ok is False
    return 1 if failed else 0


def run_sessions(args: argparse.Namespace) -> int:
    from ..hooks._open import open_store
    from ..hooks._store import StoreError

    if (problem := _inspected(args)) is not None:
        if problem == NO_STORE_YET:
            if not args.json:
                print("no sessions yet: a session appears when its vendor first runs `live-steering hook`")
            return 0
        print(f"live-steering hooks sessions: {problem}", file=sys.stderr)
        return 1
    try:
        store = open_store(args.store, dsn=args.dsn)
        try:
            rows = store.sessions()
        finally:
            store.close()
    except StoreError as exc:
        print(f"live-steering hooks sessions: {exc}", file=sys.stderr)
        return 2
    if not rows and not args.json:
        print("no sessions yet: a session appears when its vendor first runs `live-steering hook`")
        return 0
    for row in rows:
        if args.json:
            print(json.dumps(row))
            continue
        state = "ended" if row["ended"] else "live"
        unseen = "" if row["seen"] else "  (no hook has run: named only by instruct, a typo?)"
        agents = row["agents"]
        assert isinstance(agents, list)
        subagents = f"  subagents: {', '.join(map(_printable, agents))}" if agents else ""
        print(
            f"{_printable(row['session_id'])}  {row['vendor'] or '-'}  epoch {row['epoch']}  {state}  "
            f"{row['queued']} queued{unseen}{subagents}"
        )
    return 0


def run_recover(args: argparse.Namespace) -> int:
    from ..hooks._open import open_store
    from ..hooks._store import StoreError

    if _session_problem(args, "recover"):
        return 2
    if (problem := _inspected(args)) is not None:
        if problem == NO_STORE_YET:
            print(
                json.dumps({"unknown": []})
                if args.json
                else "0 claim(s) of dead hook processes finalised unknown"
            )
            return 0
        print(f"live-steering hooks recover: {problem}", file=sys.stderr)
        return 1
    try:
        store = open_store(args.store, dsn=args.dsn)
        try:
            recovered = store.recover(session_id=args.session)
        finally:
            store.close()
    except StoreError as exc:
        print(f"live-steering hooks recover: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"unknown": recovered}))
    else:
        print(f"{len(recovered)} claim(s) of dead hook processes finalised unknown")
        for command_id in recovered:
            print(f"  {_printable(command_id)}")
    return 0
