"""The hook configuration each vendor needs to run ``live-steering hook``, and a safe merge.

``config_block(vendor, store)`` is the exact block ``live-steering hooks install``
prints: every eligible moment of the vendor plus its session-end moment, each
running the hook command with ``--store`` baked in. ``merge_into(path, ...)``
writes it into an existing config file: the user's other hooks stay, earlier
live-steering entries are removed one by one (a matcher group the user shares with
them keeps the user's hooks; so installing twice changes nothing), the new file is
written and synced beside the real file (through symlinks), then the old file is copied
to ``PATH.bak`` (or ``PATH.bak.N`` when an earlier backup exists, which is never
overwritten), and the new one replaces it, atomically, with its mode kept. JSON is read
strictly (no ``NaN``), past a BOM; a lone surrogate escape is written back escaped. File
formats are cited in docs/hooks.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from typing import Any, Final

from .._errors import LiveSteeringError
from . import _vendors, _versions

__all__ = [
    "CONFIG_FILES",
    "InstallError",
    "Merged",
    "config_block",
    "hook_command",
    "merge_into",
    "moments",
    "remove_from",
    "runs_our_hook",
]

#: Where each vendor reads hook configuration (user-level; project-level paths in docs/hooks.md).
CONFIG_FILES = {
    "claude-code": "~/.claude/settings.json",
    "codex": "~/.codex/hooks.json",
    "qwen-code": "~/.qwen/settings.json",
    "vscode": ".github/hooks/live-steering.json",
    "hermes": "~/.hermes/config.yaml",
}
#: Seconds a vendor lets one hook run; ours finishes well inside (it waits 1 s for a lock at most).
HOOK_TIMEOUT_SECONDS = 10
#: The program the hook command runs: the hook entry point, straight from this installation's
#: Python. The ``live-steering`` console script pip writes imports ``re`` first (some 15 ms,
#: paid at every hook moment); ``hook VENDOR`` stays in the argv, as the script would read it.
HOOK_PROGRAM = "import sys; from live_steering._cli import hook; hook.exit_fast(); hook.main(sys.argv[2:])"
_VENDOR_NAMES = "|".join(re.escape(vendor) for vendor in CONFIG_FILES)
#: What a hook command that runs our hook holds (``live-steering hook VENDOR``, ``python -m
#: live_steering._cli hook VENDOR``, the ``HOOK_PROGRAM`` line), or an HTTP hook to ``serve``:
#: a command of the user's that runs ``live-steering hooks recover`` or only names us is not one.
_OUR_HOOK = re.compile(
    rf"(?:live-steering|live_steering\._cli) hook (?:{_VENDOR_NAMES})(?![\w-])"
    r"|from live_steering\._cli import hook;"
    rf"|/v1/hooks/(?:{_VENDOR_NAMES})(?![\w-])"
)


def runs_our_hook(text: str) -> bool:
    """Whether a hook's command (or URL) runs live-steering's hook, as ``install`` writes it."""
    return _OUR_HOOK.search(text) is not None


class InstallError(LiveSteeringError, ValueError):
    """The config file cannot be merged safely (not JSON, not an object, YAML with hooks already)."""


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")


def loads(text: str) -> Any:
    """``text`` as JSON, strictly: ``NaN``, ``Infinity`` and ``-Infinity``, which Python's ``json``
    reads but JSON (and the vendors' parsers) does not, are a ``ValueError``."""
    return json.loads(text, parse_constant=_no_constant)


#: Vendors that read their settings file with comments (``//`` and ``/* */``) allowed: Qwen Code
#: 0.24.4 parses it as ``JSON.parse(stripJsonComments(stripUtf8Bom(content)))`` (the
#: ``strip-json-comments`` package, in its bundled settings loader); Claude Code reads strict JSON.
COMMENTED_JSON: Final = frozenset({"qwen-code"})

#: What ``strip_comments`` steps over: a string (escapes included), a line comment, a block comment.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*(?:[^*]|\*(?!/))*(?:\*/|$)', re.DOTALL)


def strip_comments(text: str) -> str:
    """``text`` with its ``//`` and ``/* */`` comments outside strings turned into spaces (newlines
    kept, so a parse error's line and column still point into the file), as ``strip-json-comments``
    does for the vendors that allow them."""

    def blank(match: re.Match[str]) -> str:
        token = match[0]
        if token[0] == '"':
            return token
        return re.sub(r"[^\n]", " ", token)

    return _JSON_TOKEN.sub(blank, text)


def read_config(vendor: str, text: str) -> Any:
    """A vendor's JSON settings ``text`` as the vendor reads it: strict JSON (``loads``), comments
    allowed for the vendors of ``COMMENTED_JSON``."""
    return loads(strip_comments(text) if vendor in COMMENTED_JSON else text)


#: A UTF-16 surrogate on its own: ``"\ud83d"`` is valid JSON, read as one, but UTF-8 cannot encode it.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(config: object) -> str:
    """``config`` as the settings file ``merge_into`` writes: indented, non-ASCII kept as is, a
    lone surrogate (only a string can hold one) written as its ``\\uXXXX`` escape, as it was read."""
    text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


#: Moments a vendor never runs an HTTP hook at: Claude Code 2.1.197 and 2.1.332 skip them
#: ("Skipping HTTP hook ... HTTP hooks are not supported for SessionStart", in their debug
#: log and in the CLI's own source, for SessionStart and Setup).
NO_HTTP_MOMENTS: dict[str, frozenset[str]] = {"claude-code": frozenset({"SessionStart", "Setup"})}


def moments(vendor: str, version: _versions.Version | None = None, *, http: bool = False) -> list[str]:
    """The moments the config wires for ``version`` of the vendor (``None``: the newest verified).

    A vendor with a version table (``_versions.TABLES``: Claude Code, Codex, Qwen Code, Hermes)
    gets its row's moments; the others every eligible moment, sorted, then the session-end moment.
    ``http``: for the vendor's HTTP hooks, less the moments it runs no HTTP hook at.
    """
    row = _versions.wiring(vendor, version)
    if row is not None:
        skipped = NO_HTTP_MOMENTS.get(vendor, frozenset()) if http else frozenset()
        return [m for m in row.moments if m not in skipped]
    facts = _vendors.FACTS[vendor]
    wired = sorted(facts.context_moments)
    if facts.session_end_moment is not None:
        wired.append(facts.session_end_moment)
    return wired


def _script() -> list[str]:
    """The argv prefix of this installation's hook command: its Python, absolute, running the
    hook entry point (``HOOK_PROGRAM``); ``hooks doctor`` tells a command of ours by it."""
    return [os.path.abspath(sys.executable), "-c", HOOK_PROGRAM]


def hook_command(vendor: str, store: str | None, dsn: str | None = None) -> str:
    """The shell command the vendor runs: the running installation's Python (absolute) running
    ``live-steering hook VENDOR`` (``HOOK_PROGRAM``: the entry point without the console
    script's start-up).

    ``dsn``: a PostgreSQL store, baked in as ``--dsn`` (mind a password in it: prefer a
    passfile or ``$LIVE_STEERING_STORE_DSN``, see docs/hooks.md).
    """
    argv = [*_script(), "hook", vendor]
    if store is not None:
        argv += ["--store", os.path.abspath(store)]
    if dsn is not None:
        argv += ["--dsn", dsn]
    return shlex.join(argv)


def _timeout(vendor: str, moment: str, version: _versions.Version | None) -> int:
    """The ``timeout`` value for one moment, in the unit that version of the vendor reads."""
    row = _versions.wiring(vendor, version)
    if row is None:
        return HOOK_TIMEOUT_SECONDS
    seconds = row.timeouts.get(moment, HOOK_TIMEOUT_SECONDS)
    return seconds * 1000 if row.timeout_ms else seconds


def hook_url(vendor: str, base: str) -> str:
    """The HTTP hook route of ``live-steering serve`` at ``base`` for ``vendor``.

    >>> hook_url("claude-code", "http://127.0.0.1:8765/")
    'http://127.0.0.1:8765/v1/hooks/claude-code'
    """
    return f"{base.rstrip('/')}/v1/hooks/{vendor}"


#: Vendors whose hook config has an ``http`` hook type (the vendor POSTs the hook JSON).
HTTP_VENDORS = ("claude-code", "qwen-code")


def _entry(
    vendor: str,
    command: str,
    moment: str,
    version: _versions.Version | None,
    http: str | None = None,
    token_env: str | None = None,
) -> dict[str, Any]:
    timeout = _timeout(vendor, moment, version)
    if http is not None:  # {"type": "http", "url", "timeout"}, in the vendor's unit
        entry: dict[str, Any] = {"type": "http", "url": hook_url(vendor, http)}
        if token_env is not None:  # both vendors interpolate ${VAR} only for allowedEnvVars
            entry["headers"] = {"Authorization": f"Bearer ${{{token_env}}}"}
            entry["allowedEnvVars"] = [token_env]
    else:
        entry = {"type": "command", "command": command}
    if vendor == "qwen-code":
        entry["name"] = "live-steering"
    entry["timeout"] = timeout
    return entry


def config_block(
    vendor: str,
    store: str | None,
    dsn: str | None = None,
    *,
    version: _versions.Version | None = None,
    http: str | None = None,
    token_env: str | None = None,
) -> dict[str, Any] | str:
    """The vendor's config: a JSON object, or for Hermes the YAML text of its ``hooks:`` section.

    ``version``: the installed vendor version it is for (``_versions.detect``'s tuple);
    ``None``, the newest verified one. It decides the moments
    wired (``moments``) and their timeouts' unit. ``http``: the base URL of a ``live-steering
    serve`` server; the hooks are then the vendor's HTTP hooks to its ``/v1/hooks/VENDOR`` route.
    ``token_env``: with ``http``, the environment variable holding the server's token; each
    entry sends ``Authorization: Bearer ${VAR}`` (``headers`` and ``allowedEnvVars``).
    """
    if vendor not in _vendors.FACTS:
        raise ValueError(f"unknown vendor {vendor!r}; expected one of {', '.join(_vendors.FACTS)}")
    if http is not None and vendor not in HTTP_VENDORS:
        raise ValueError(f"{vendor} has no HTTP hooks; --http is for {' and '.join(HTTP_VENDORS)}")
    if token_env is not None and http is None:
        raise ValueError("--token-env is for --http hooks (the token of the server they call)")
    command = hook_command(vendor, store, dsn)
    wired = moments(vendor, version, http=http is not None)
    if vendor == "hermes":
        lines = ["hooks:"]
        for moment in wired:
            lines += [
                f"  {moment}:",
                f"    - command: {json.dumps(command)}",
                f"      timeout: {_timeout(vendor, moment, version)}",
            ]
        return "\n".join(lines) + "\n"
    if vendor == "vscode":  # VS Code: a flat list of commands per event, no matcher groups
        return {"hooks": {m: [_entry(vendor, command, m, version)] for m in wired}}
    return {"hooks": {m: [{"hooks": [_entry(vendor, command, m, version, http, token_env)]}] for m in wired}}


def _ours(entry: object) -> bool:
    return runs_our_hook(json.dumps(entry))


def _without_ours(entry: object) -> object | None:
    """``entry`` less our hook commands; ``None`` when nothing of the user's is left in it.

    A matcher group (``{"matcher"?, "hooks": [...]}``) loses only our commands and keeps
    its matcher and the user's commands; a flat command entry (VS Code) is ours or not.
    """
    if isinstance(entry, dict) and isinstance(entry.get("hooks"), list):
        inner = entry["hooks"]
        kept = [h for h in inner if not _ours(h)]
        if len(kept) == len(inner):
            return entry
        return {**entry, "hooks": kept} if kept else None
    return None if _ours(entry) else entry


def _entries_without_ours(entries: list[Any]) -> list[Any]:
    """A moment's hook list less our entries (``_without_ours`` of each, the emptied ones dropped)."""
    return [e for e in (_without_ours(e) for e in entries) if e is not None]


def _backup(path: str) -> str | None:
    """Copy ``path`` to ``PATH.bak``, or ``PATH.bak.N`` (the first free N) if that exists."""
    if not os.path.exists(path):
        return None
    backup = path + ".bak"
    n = 0
    while os.path.lexists(backup):
        n += 1
        backup = f"{path}.bak.{n}"
    shutil.copy2(path, backup)
    return backup


def _replace(path: str, text: str, *, backup: bool = False) -> str | None:
    """Write ``text`` to the file ``path`` names (symlinks followed), atomically, keeping its mode.

    ``backup``: copy the previous file first (``_backup``), once the new one is written and
    synced beside it, so a write that cannot succeed leaves no copy behind. Returns the copy.
    """
    data = text.encode("utf-8")  # before anything is made: unencodable text changes nothing
    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    os.makedirs(directory, exist_ok=True)
    owner: tuple[int, int] | None = None
    try:
        status = os.stat(target)
        mode = status.st_mode & 0o7777
        owner = (status.st_uid, status.st_gid)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    saved = None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if owner is not None and owner != (os.geteuid(), os.getegid()):
                # root editing another user's settings: the file stays theirs (chown after
                # chmod would clear set-id bits, so the mode is set again after it)
                try:
                    os.fchown(f.fileno(), *owner)
                except PermissionError:
                    if os.geteuid() == 0:
                        raise
                    # not root: only our own groups are ours to give; the file is ours then
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        if backup:
            saved = _backup(path)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return saved
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return saved


#: ``disableAllHooks``: a top-level setting of Claude Code and Qwen Code that turns every hook
#: off (Claude Code 2.1.197: "Disable all hooks and statusLine execution"; Qwen Code 0.21.2 and
#: later, docs/features/hooks.md: "turn off all hooks, including user hooks").
DISABLE_ALL_HOOKS: Final = {"claude-code": "disableAllHooks", "qwen-code": "disableAllHooks"}


class Merged:
    """What ``merge_into`` did: the file it wrote, the backup it made, whether anything changed,
    and the vendor's switch for every hook if the file turns them all off."""

    __slots__ = ("backup", "changed", "disabled_by", "path")

    def __init__(self, path: str, backup: str | None, changed: bool, disabled_by: str | None = None) -> None:
        self.path = path
        """The real file written (``PATH`` with its symlinks resolved)."""
        self.backup = backup
        """The copy of the previous file (``PATH.bak`` or ``PATH.bak.N``), or ``None``."""
        self.changed = changed
        """False when the file already held exactly this config: nothing was written or copied."""
        self.disabled_by = disabled_by
        """``"disableAllHooks"`` when the file sets it true: the vendor runs none of the hooks."""

    def __repr__(self) -> str:
        return f"Merged({self.path!r}, backup={self.backup!r}, changed={self.changed!r})"


# One line of an event entry ``config_block`` writes for Hermes, at the indentation of its file,
# with a comment after it or not.
_OUR_HERMES_LINE = re.compile(r'\s*(?:[a-z_]+:|- command: ".*"|timeout: \d+)(?:\s+#[^"]*)?\s*')


def _hermes_section(lines: list[str]) -> tuple[int, int] | None:
    """The ``[start, end)`` line range of the top-level ``hooks:`` section, or ``None``."""
    for start, line in enumerate(lines):
        if line.startswith("hooks:"):
            end = start + 1
            while end < len(lines) and (not lines[end].strip() or lines[end][:1] in (" ", "\t")):
                end += 1
            while end > start + 1 and not lines[end - 1].strip():
                end -= 1
            return start, end
    return None


def _hermes_indent(body: list[str]) -> int:
    """How far the section's keys are indented: its first line that is not blank or a comment
    (two spaces, as ``config_block`` writes, when there is none)."""
    for line in body:
        if line.strip() and not line.lstrip().startswith("#"):
            return len(line) - len(line.lstrip(" "))
    return 2


def _hermes_children(body: list[str]) -> list[list[str]]:
    """The section's children (a key at the section's indentation and the deeper lines under
    it), in order."""
    key = re.compile(rf" {{{_hermes_indent(body)}}}[^\s#]")
    children: list[list[str]] = []
    for line in body:
        if key.match(line) or not children:
            children.append([line])
        else:
            children[-1].append(line)
    return children


def _is_our_hermes_entry(child: list[str]) -> bool:
    return _ours(child) and all(_OUR_HERMES_LINE.fullmatch(line) for line in child if line.strip())


def _merge_hermes(path: str, existing: str, block: str) -> str:
    """Our event entries into ``hooks:``; the user's settings there (``output_spill``, ...) stay.

    An event we wire that the user also wired with commands of their own is refused (their
    list is theirs to edit); their other events and settings (``output_spill: {max_chars:
    ...}``) are kept as they are.
    """
    lines = existing.splitlines()
    section = _hermes_section(lines)
    if section is None:
        return existing + ("\n" if existing and not existing.endswith("\n") else "") + block
    start, end = section
    head = lines[start].split("#", 1)[0].strip()
    if head not in ("hooks:", "hooks: {}"):
        raise InstallError(
            f"{path}: its hooks: section is written inline; write it as a block (one key a line) "
            "or add the printed entries by hand; nothing was changed"
        )
    ours = block.splitlines()[1:]
    ours_keys = {line.strip().rstrip(":") for line in ours if re.fullmatch(r"  [a-z_]+:", line)}
    body = lines[start + 1 : end]
    # our entries at the file's own indentation (a section indented with four spaces gets ours
    # at four: YAML refuses a mapping whose keys sit at two indentations)
    indent = " " * _hermes_indent(body)
    ours = [indent + line[2:] if line.strip() else line for line in ours]
    kept: list[str] = []
    for child in _hermes_children(body):
        key = child[0].strip().split(":", 1)[0]
        if not child[0].strip() or child[0].lstrip().startswith("#"):
            kept += child
            continue
        if _is_our_hermes_entry(child):
            continue  # an entry of ours: replaced by the new block
        if key in ours_keys:
            raise InstallError(
                f"{path} already wires the Hermes event {key!r} with hooks of its own; add the printed "
                "entries to it by hand (or use the Hermes plugin, see docs/hooks.md); nothing was changed"
            )
        kept += child  # a setting of the user's (output_spill, ...): kept as it is
    merged = [*lines[:start], "hooks:", *kept, *ours, *lines[end:]]
    return "\n".join(merged) + "\n"


def _read_text(path: str, target: str) -> str:
    """The config file's text (``""`` when there is none), or ``InstallError`` if it is not UTF-8."""
    if not os.path.exists(target):
        return ""
    try:
        # utf-8-sig: a BOM (as Windows editors save) is read past, as the vendors read it
        with open(target, encoding="utf-8-sig") as f:
            return f.read()
    except UnicodeDecodeError as exc:
        raise InstallError(
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); nothing was changed"
        ) from None


def _read_json(path: str, vendor: str, existing: str, by_hand: str, act: str = "a merge") -> dict[str, Any]:
    """The JSON config object of ``existing`` (``{}`` when blank), or ``InstallError`` when it cannot
    be rewritten safely; ``by_hand`` says what to do instead when it has comments."""
    try:
        config = read_config(vendor, existing) if existing.strip() else {}
    except ValueError as exc:
        raise InstallError(f"{path} is not JSON ({exc}); nothing was changed") from exc
    except RecursionError:
        raise InstallError(f"{path} is JSON nested too deeply to read; nothing was changed") from None
    if not isinstance(config, dict) or not isinstance(config.get("hooks", {}), dict):
        raise InstallError(f"{path}: expected a JSON object with a 'hooks' object; nothing was changed")
    if vendor in COMMENTED_JSON and strip_comments(existing) != existing:
        raise InstallError(
            f"{path} has comments, which {_vendors.FACTS[vendor].title} reads but {act} would "
            f"drop; nothing was changed: {by_hand.format(vendor=vendor)}, "
            "or remove the comments and run this again"
        )
    return config


def merge_into(
    path: str,
    vendor: str,
    store: str | None,
    dsn: str | None = None,
    *,
    version: _versions.Version | None = None,
    http: str | None = None,
    token_env: str | None = None,
) -> Merged:
    """Merge the vendor's block into the config file at ``path`` (symlinks followed).

    Raises ``InstallError`` (and changes nothing) when the file cannot be merged safely.
    A file that already holds exactly this config is left untouched (``changed=False``).
    ``version``: as ``config_block``.
    """
    block = config_block(vendor, store, dsn, version=version, http=http, token_env=token_env)
    target = os.path.realpath(path)
    existing = _read_text(path, target)
    disabled_by: str | None = None
    if isinstance(block, str):  # Hermes: YAML, merged as text (our own section is replaced)
        merged_text = _merge_hermes(path, existing, block)
    else:
        config = _read_json(path, vendor, existing, "add the block `hooks install {vendor}` prints by hand")
        hooks = config.setdefault("hooks", {})
        for moment, current in list(hooks.items()):
            if not isinstance(current, list):
                if moment in block["hooks"]:
                    raise InstallError(f"{path}: hooks.{moment} is not a list; nothing was changed")
                continue
            kept = _entries_without_ours(current)
            if kept or not current or moment in block["hooks"]:
                hooks[moment] = kept
            else:  # only ours was there, and we no longer wire this moment
                del hooks[moment]
        for moment, entries in block["hooks"].items():
            hooks[moment] = hooks.get(moment, []) + entries
        merged_text = dumps(config)
        switch = DISABLE_ALL_HOOKS.get(vendor)
        if switch is not None and config.get(switch) is True:
            disabled_by = switch
    if merged_text == existing:
        return Merged(target, None, False, disabled_by)
    backup = _replace(path, merged_text, backup=True)
    return Merged(target, backup, True, disabled_by)


def remove_from(path: str, vendor: str) -> Merged:
    """Take every live-steering hook entry out of the vendor's config file at ``path`` (symlinks
    followed): what ``merge_into`` wrote, command or HTTP hooks, for any store. The user's own
    hooks stay as they are, a matcher group shared with them keeps its other hooks, an event
    left with no hook loses its key (and ``hooks`` itself, once empty). The previous file is
    copied first, as ``merge_into`` does. A file with none of ours, or no file, is left
    untouched (``changed=False``); one that cannot be read safely raises ``InstallError``.
    """
    if vendor not in _vendors.FACTS:
        raise ValueError(f"unknown vendor {vendor!r}; expected one of {', '.join(_vendors.FACTS)}")
    target = os.path.realpath(path)
    existing = _read_text(path, target)
    if not existing.strip():
        return Merged(target, None, False)
    if vendor == "hermes":
        remaining = _unmerge_hermes(path, existing)
        if remaining is None:
            return Merged(target, None, False)
        text = remaining
    else:
        config = _read_json(
            path, vendor, existing, "delete the entries that run live-steering by hand", "rewriting it"
        )
        hooks = config.get("hooks")
        if not hooks:
            return Merged(target, None, False)
        removed = False
        for moment, current in list(hooks.items()):
            if not isinstance(current, list):
                continue  # not a hook list a vendor reads: not ours to judge
            kept = _entries_without_ours(current)
            if kept == current:
                continue
            removed = True
            if kept:
                hooks[moment] = kept
            else:
                del hooks[moment]
        if not removed:
            return Merged(target, None, False)
        if not hooks:
            del config["hooks"]
        text = dumps(config)
    backup = _replace(path, text, backup=True)
    return Merged(target, backup, True)


def _unmerge_hermes(path: str, existing: str) -> str | None:
    """``existing`` without the event entries ``config_block`` writes for Hermes; ``None`` when it
    has none. An event the user wired with commands of their own stays whole (the merge refuses to
    share one); a ``hooks:`` section left empty is removed with its header."""
    lines = existing.splitlines()
    section = _hermes_section(lines)
    if section is None:
        return None
    start, end = section
    kept: list[str] = []
    removed = False
    for child in _hermes_children(lines[start + 1 : end]):
        if child[0].strip() and not child[0].lstrip().startswith("#") and _is_our_hermes_entry(child):
            removed = True
            continue
        kept += child
    if not removed:
        return None
    # the header stays with a setting, an event or a comment of the user's under it
    section_lines = [lines[start], *kept] if any(line.strip() for line in kept) else []
    remaining = [*lines[:start], *section_lines, *lines[end:]]
    return "\n".join(remaining) + "\n" if remaining else ""


_HERMES_PROFILE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def hermes_home(profile: str | None = None) -> str:
    """The Hermes home a plugin goes into, as Hermes 0.19.0 resolves it.

    ``$HERMES_HOME``, else ``~/.hermes`` (``hermes_constants.get_hermes_home``); with
    ``profile`` (``hermes -p NAME``) or a sticky ``active_profile`` file in the root,
    ``<root>/profiles/NAME``, the root being ``~/.hermes`` or the ``$HERMES_HOME`` that is
    not itself a profile (``hermes_cli/profiles.py``). ``default`` is the root.
    """
    env = os.environ.get("HERMES_HOME", "").strip()
    if profile is None and env:
        return os.path.abspath(os.path.expanduser(env))
    root = os.path.abspath(os.path.expanduser(env)) if env else os.path.expanduser("~/.hermes")
    if env and os.path.basename(os.path.dirname(root)) == "profiles":
        root = os.path.dirname(os.path.dirname(root))
    if profile is None:
        try:
            with open(os.path.join(root, "active_profile"), encoding="utf-8") as f:
                profile = f.read().strip() or None
        except OSError:
            profile = None
    if profile is None or profile == "default":
        return root
    if not _HERMES_PROFILE.fullmatch(profile):
        raise ValueError(f"{profile!r} is not a Hermes profile name ([a-z0-9][a-z0-9_-]{{0,63}})")
    return os.path.join(root, "profiles", profile)


def hermes_plugin_dir(profile: str | None = None) -> str:
    """Where ``hooks install hermes --plugin`` writes the plugin: ``<hermes home>/plugins/live-steering``."""
    return os.path.join(hermes_home(profile), "plugins", "live-steering")


def write_hermes_plugin(directory: str, store: str | None) -> list[str]:
    """Write the Hermes directory plugin (``plugin.yaml`` + ``__init__.py``) into ``directory``.

    Its ``register(ctx)`` is ``live_steering.hooks.hermes.register`` with ``store``
    baked in, so Hermes must run in a Python environment where live-steering is
    installed. Hermes loads a standalone plugin once it is named under
    ``plugins: enabled:`` in its ``config.yaml``. Returns the files written (a file that
    already holds this content is left alone; a changed one is backed up first).
    """
    from .. import __version__

    directory = os.path.expanduser(directory)
    os.makedirs(directory, exist_ok=True)
    manifest = (
        "name: live-steering\n"
        f"version: {__version__}\n"
        "description: Steer this session with live-steering instruct (pre_llm_call context; "
        "dropped at on_session_finalize)\n"
        "provides_hooks:\n"
        "  - pre_llm_call\n"
        "  - on_session_start\n"
        "  - on_session_finalize\n"
    )
    store_repr = repr(os.path.abspath(store)) if store is not None else "None"
    init = (
        '"""live-steering for Hermes: written by `live-steering hooks install hermes --plugin`."""\n\n'
        "from live_steering.hooks.hermes import HermesSteering\n\n\n"
        "def register(ctx):\n"
        f"    HermesSteering({store_repr}).register(ctx)\n"
    )
    written = []
    for name, text in (("plugin.yaml", manifest), ("__init__.py", init)):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    continue  # already this plugin: nothing to copy or write
        _replace(path, text, backup=True)
        written.append(path)
    return written


#: The files ``write_hermes_plugin`` writes; what ``remove_hermes_plugin`` may take away.
_PLUGIN_FILES = ("plugin.yaml", "__init__.py")


def remove_hermes_plugin(directory: str) -> list[str]:
    """Remove the plugin ``write_hermes_plugin`` wrote into ``directory``; the paths removed.

    Our two files go (each recognised by what we write in it), with the backups of them a later
    install made (``__init__.py.bak``, ...: ours by the same test; a backup of a file that was
    not ours stays) and the bytecode Python cached for our ``__init__.py``, then the folder if
    nothing else is left in it. A file of one of our two names that is not ours raises
    ``InstallError`` before anything is removed.
    """
    directory = os.path.expanduser(directory)
    marks = {"plugin.yaml": "name: live-steering\n", "__init__.py": "from live_steering.hooks.hermes import"}

    def ours(path: str, name: str) -> bool:
        try:
            with open(path, encoding="utf-8") as f:
                return marks[name] in f.read()
        except (UnicodeDecodeError, OSError):
            return False

    present = [name for name in _PLUGIN_FILES if os.path.isfile(os.path.join(directory, name))]
    for name in present:
        path = os.path.join(directory, name)
        if not ours(path, name):
            raise InstallError(f"{path} is not the live-steering plugin's; nothing was removed")
    if not present:
        return []
    backups = re.compile(rf"({'|'.join(map(re.escape, _PLUGIN_FILES))})\.bak(?:\.\d+)?")
    removed = [os.path.join(directory, name) for name in present]
    for name in sorted(os.listdir(directory)):
        match = backups.fullmatch(name)
        path = os.path.join(directory, name)
        if match and os.path.isfile(path) and ours(path, match[1]):
            removed.append(path)
    for path in removed:
        os.unlink(path)
    cache = os.path.join(directory, "__pycache__")
    if os.path.isdir(cache):
        for name in os.listdir(cache):
            if name.startswith("__init__.") and name.endswith(".pyc"):
                os.unlink(os.path.join(cache, name))
        with contextlib.suppress(OSError):
            os.rmdir(cache)  # only when empty
    with contextlib.suppress(OSError):
        os.rmdir(directory)  # only when empty: a file of the user's keeps it
    return removed
