"""The package's import graph keeps the layers of docs/architecture.md (read with ``ast``, nothing imported).

Three rules: no import cycle; no module imports from a layer above its own (the
core, types, errors and validation import nothing above them; no library module
imports the CLI); and no top-level module imports an optional dependency, which
each wing imports alone. Each rule is also run on a small made-up graph that
breaks it, so the checks are known to be able to fail.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = "live_steering"
SRC = Path(__file__).resolve().parent.parent / "src" / PACKAGE

#: The layers, lowest first; a module may import only from lower layers or its own wing.
#: A wing (a subpackage) not named here is a wing like journal/, hooks/ and acp/.
LAYERS: Mapping[str, int] = {
    f"{PACKAGE}._validate": 0,
    f"{PACKAGE}._errors": 0,
    f"{PACKAGE}._extras": 0,
    f"{PACKAGE}._processes": 0,  # whether a pid still runs: the SQLite stores' liveness check
    f"{PACKAGE}._admission": 0,  # the one refusal order (C7): every surface's decide
    f"{PACKAGE}._types": 1,
    f"{PACKAGE}._rules": 2,  # the core's tables: states, moves, endings
    f"{PACKAGE}._core": 3,
    f"{PACKAGE}._events": 3,
    f"{PACKAGE}._parking": 3,
    f"{PACKAGE}._runtime": 4,
    f"{PACKAGE}.loop": 5,
    PACKAGE: 5,  # the public face: __init__.py
    f"{PACKAGE}.journal": 6,
    f"{PACKAGE}.hooks": 6,
    f"{PACKAGE}.acp": 6,
    f"{PACKAGE}.otel": 6,
    f"{PACKAGE}.fleet": 7,  # the receipt journal across processes: built on journal/'s changes
    f"{PACKAGE}.testing": 8,
    f"{PACKAGE}.http": 8,  # the HTTP surface over the fleet (7) and the hook relay (6)
    f"{PACKAGE}._cli": 9,
    f"{PACKAGE}.__main__": 10,  # ``python -m live_steering``: the entry above the CLI
}
WING_LAYER = 6
CLI = f"{PACKAGE}._cli"

#: Optional dependencies (pip extras and the SDKs integrations wrap): only a wing imports one.
OPTIONAL = frozenset(
    {
        "acp",
        "httpx",
        "psycopg",
        "amplifier_core",
        "pydantic_ai",
        "agents",
        "claude_agent_sdk",
        "opentelemetry",
        "langgraph",
        "langchain_core",
        "starlette",
        "uvicorn",
        "hypercorn",
    }
)

#: An extra that serves several wings, each importing it only behind its own door: PostgreSQL
#: (the ``postgres`` extra) is the fleet's store and the hook relay's (``hooks._postgres``).
SHARED_OPTIONAL = {"psycopg": frozenset({f"{PACKAGE}.fleet", f"{PACKAGE}.hooks"})}

Graph = dict[str, set[str]]


def module_of(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (SRC.parent / relative).with_suffix(".py").is_file() or (
        SRC.parent / relative / "__init__.py"
    ).is_file()


def _type_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:`` (never run, so never a cycle)."""
    nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            nodes.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return nodes


def read_imports(path: Path, *, type_only: bool = True) -> tuple[set[str], set[str]]:
    """The package modules and the top-level external names that ``path`` imports, anywhere in it
    (``type_only=False``: leaving out the imports only a type checker runs)."""
    module = module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    internal: set[str] = set()
    external: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = set() if type_only else _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.partition(".")[0]
                (internal if top == PACKAGE else external).add(alias.name if top == PACKAGE else top)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                assert node.module is not None
                if node.module.partition(".")[0] != PACKAGE:
                    external.add(node.module.partition(".")[0])
                    continue
                base = node.module
            else:
                base = ".".join(package.split(".")[: len(package.split(".")) - (node.level - 1)])
                if node.module:
                    base = f"{base}.{node.module}"
            names = {f"{base}.{alias.name}" for alias in node.names}
            submodules = {name for name in names if _is_module(name)}
            # ``from . import _store``: the submodule itself (its package is its parent, run first
            # whatever imports it); a name defined in ``base`` is an import of ``base``.
            internal.update(submodules)
            if len(submodules) < len(node.names):
                internal.add(base)
    internal.discard(module)
    return internal, external


def package_graph(*, type_only: bool = True) -> tuple[Graph, dict[str, set[str]]]:
    graph: Graph = {}
    externals: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        graph[module_of(path)], externals[module_of(path)] = read_imports(path, type_only=type_only)
    return graph, externals


def wing_of(module: str) -> str | None:
    """``live_steering.journal`` for ``live_steering.journal._store``; ``None`` for a top-level module."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    candidate = ".".join(parts[:2])
    return candidate if (SRC.parent / Path(*parts[:2]) / "__init__.py").is_file() else None


def layer_of(module: str) -> int:
    for name in (module, *(module.rsplit(".", n)[0] for n in range(1, module.count(".")))):
        if name in LAYERS:
            return LAYERS[name]
    if wing_of(module) is not None:  # a wing not named in LAYERS: a wing like journal/
        return WING_LAYER
    if module == PACKAGE:
        return LAYERS[PACKAGE]
    raise AssertionError(
        f"{module} is a new top-level module: give it a layer in LAYERS and docs/architecture.md"
    )


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with a cycle (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward_imports(graph: Graph) -> list[str]:
    """Every import of a module from its own layer or above, outside its own wing."""
    wrong = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            same_wing = wing_of(module) is not None and wing_of(module) == wing_of(target)
            if not same_wing and layer_of(target) >= layer_of(module):
                wrong.append(
                    f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
                )
    return wrong


def misplaced_optional_imports(externals: Mapping[str, Iterable[str]]) -> list[str]:
    """Optional dependencies imported by a top-level module, or by more than one wing."""
    wrong = []
    wings: dict[str, set[str]] = {}
    for module, names in sorted(externals.items()):
        for name in sorted(OPTIONAL.intersection(names)):
            wing = wing_of(module)
            if wing is None:
                wrong.append(f"top-level module {module} imports the optional dependency {name}")
            elif wing != CLI:  # the CLI starts wings, so it may check that their extra is installed
                wings.setdefault(name, set()).add(wing)
    wrong += [
        f"{name} is imported by several wings: {sorted(w)}"
        for name, w in sorted(wings.items())
        if len(w) > 1 and not w <= SHARED_OPTIONAL.get(name, frozenset())
    ]
    return wrong


# -- the package --------------------------------------------------------------------------------


def test_the_graph_reads_the_package() -> None:
    """The reader sees the package as it is: every module, and imports known to be there."""
    graph, externals = package_graph()
    assert {f"{PACKAGE}._core", f"{PACKAGE}.journal._store", f"{PACKAGE}._cli.demo"} <= set(graph)
    assert f"{PACKAGE}._core" in graph[f"{PACKAGE}._runtime"]
    assert f"{PACKAGE}.journal._store" in graph[f"{PACKAGE}.journal"]  # ``from . import _store as store``
    assert {f"{PACKAGE}._cli.acp", f"{PACKAGE}._cli.demo"} <= graph[CLI]  # ``from . import acp, demo``
    assert "acp" in externals[f"{PACKAGE}.acp"]


def test_the_package_has_no_import_cycle() -> None:
    """No module reaches itself through imports that run, even imports made inside functions
    (an ``if TYPE_CHECKING:`` import never runs; the layer rules still read it)."""
    graph, _ = package_graph(type_only=False)
    assert cycles(graph) == []


def test_type_only_imports_are_left_out_of_the_cycle_graph() -> None:
    """acp/_turn.py names SteeringSession for the type checker only: the run-time graph omits it."""
    turn = SRC / "acp" / "_turn.py"
    assert f"{PACKAGE}.acp._session" in read_imports(turn)[0]
    assert f"{PACKAGE}.acp._session" not in read_imports(turn, type_only=False)[0]


def test_no_module_imports_from_a_higher_layer() -> None:
    """Core, types, errors and validation import nothing above them; wings import lower layers only."""
    graph, _ = package_graph()
    assert upward_imports(graph) == []


def test_no_library_module_imports_the_cli() -> None:
    """The CLI is the top layer: it may import anything, and nothing of the library imports it."""
    graph, _ = package_graph()
    assert [
        m
        for m, targets in graph.items()
        if wing_of(m) != CLI and m != f"{PACKAGE}.__main__" and any(t.startswith(CLI) for t in targets)
    ] == []


def test_the_bottom_layers_import_nothing_of_the_package_above_them() -> None:
    """The sans-IO core sits on its tables, types, errors and validation alone; validation on nothing."""
    graph, _ = package_graph()
    assert graph[f"{PACKAGE}._validate"] == set()
    assert graph[f"{PACKAGE}._admission"] == set()
    assert graph[f"{PACKAGE}._rules"] <= {f"{PACKAGE}._errors", f"{PACKAGE}._types"}
    assert graph[f"{PACKAGE}._core"] <= {
        f"{PACKAGE}._admission",
        f"{PACKAGE}._rules",
        f"{PACKAGE}._errors",
        f"{PACKAGE}._types",
        f"{PACKAGE}._validate",
    }


def test_optional_dependencies_stay_in_their_wing() -> None:
    """``import live_steering`` never pulls an optional dependency: only its own wing imports it."""
    _, externals = package_graph()
    assert misplaced_optional_imports(externals) == []


# -- the checks can fail --------------------------------------------------------------------------


def test_the_cycle_check_finds_a_cycle() -> None:
    """A made-up graph with a cycle through three modules and a self-import is reported."""
    graph: Graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}, "e": {"a"}}
    assert cycles(graph) == [["a", "b", "c"], ["d"]]


@pytest.mark.parametrize(
    ("module", "target"),
    [
        (f"{PACKAGE}._core", f"{PACKAGE}._runtime"),  # the core reaching into the shell
        (f"{PACKAGE}._types", f"{PACKAGE}._core"),
        (f"{PACKAGE}._rules", f"{PACKAGE}._core"),  # a table reaching into the machine
        (f"{PACKAGE}.acp", f"{PACKAGE}._cli.acp"),  # a wing importing its own CLI module
        (f"{PACKAGE}.journal", f"{PACKAGE}.hooks"),  # one wing importing another of its layer
    ],
)
def test_the_layer_check_finds_an_upward_import(module: str, target: str) -> None:
    """An import from the same layer or above, outside the importer's wing, is reported."""
    assert upward_imports({module: {target}}) != []


def test_the_optional_dependency_check_finds_a_misplaced_import() -> None:
    """An SDK imported by a top-level module, or by two wings, is reported."""
    assert misplaced_optional_imports({f"{PACKAGE}._runtime": {"httpx"}}) != []
    assert misplaced_optional_imports({f"{PACKAGE}.acp": {"acp"}, f"{PACKAGE}.journal": {"acp"}}) != []
    assert misplaced_optional_imports({f"{PACKAGE}.acp._session": {"acp"}, f"{CLI}.acp": {"acp"}}) == []


def test_the_architecture_page_names_every_top_level_module() -> None:
    """docs/architecture.md stays the map: it names every top-level module, and every file it names exists."""
    page = (SRC.parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`src/live_steering/([\w/]+(?:\.py|/))`", page))
    for name in named:
        assert (SRC / name).exists(), f"docs/architecture.md names src/live_steering/{name}, which is gone"
    top_level = {path.name for path in SRC.glob("*.py")}
    assert top_level <= named, f"docs/architecture.md does not name {sorted(top_level - named)}"


# -- one decision, one door (issue 20): where refusals are decided, and how wings reach the core --

#: The modules below the wings: the order, the tables, the machine, the shell and the public face.
CORE_SIDE = frozenset(
    f"{PACKAGE}.{name}"
    for name in ("_validate", "_errors", "_extras", "_admission", "_types", "_rules", "_core", "_events")
) | {f"{PACKAGE}._parking", f"{PACKAGE}._runtime", PACKAGE}
#: Calls that make an answer for a host: a refusal reason written into one is a decision.
ANSWER_CALLS = frozenset(
    {"Receipt", "build_receipt", "_receipt", "StoredReceipt", "InstructionReceipt", "SteerResult", "_refuse"}
)
REASONS = frozenset(
    {
        "closed",
        "unavailable",
        "unsupported-kind",
        "invalid-input",
        "identity-conflict",
        "stale-generation",
        "finishing",
        "queue-full",
        "capacity",
    }
)


def _wing_modules() -> Iterable[tuple[str, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        module = module_of(path)
        if module not in CORE_SIDE:
            yield module, ast.parse(path.read_text(encoding="utf-8"))


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def reasons_decided_in(tree: ast.AST) -> list[str]:
    """Refusal reasons a module writes into an answer itself: a reason's string, or a
    ``RefusalReason``/``InstructionRefusal`` member, passed to a receipt or a refusal."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _called_name(node) not in ANSWER_CALLS:
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(arg, ast.Constant) and arg.value in REASONS:
                found.append(f"line {node.lineno}: {arg.value!r}")
            elif isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name):
                if arg.value.id in {"RefusalReason", "InstructionRefusal"}:
                    found.append(f"line {node.lineno}: {arg.value.id}.{arg.attr}")
            elif (
                isinstance(arg, ast.Attribute)
                and isinstance(arg.value, ast.Attribute)
                and isinstance(arg.value.value, ast.Name)
                and arg.value.value.id in {"RefusalReason", "InstructionRefusal"}
            ):
                found.append(f"line {node.lineno}: {arg.value.value.id}.{arg.value.attr}")
    return found


def reaches_past_the_door(tree: ast.AST) -> list[str]:
    """What a wing takes from the core other than through ``_runtime.internals``: a name of
    ``_core``/``_rules`` that is not a constant, or the ``_core`` attribute of a runtime."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in {"_core", "_rules"}:
            found += [f"line {node.lineno}: {a.name}" for a in node.names if not a.name.isupper()]
        elif isinstance(node, ast.Attribute) and node.attr == "_core":
            found.append(f"line {node.lineno}: ._core")
    return found


def test_no_wing_decides_a_refusal_reason_of_its_own() -> None:
    """C7 (amended): every refusal a wing answers comes from ``_admission.decide`` (or the core
    through the runtime); none writes a reason into a receipt or a refusal in its own words."""
    offenders = {module: found for module, tree in _wing_modules() if (found := reasons_decided_in(tree))}
    assert offenders == {}


def test_no_wing_reaches_the_core_past_its_door() -> None:
    """Wings reach the core's state only through ``_runtime.internals`` (docs/architecture.md,
    "The one door for wings"): from ``_core`` and ``_rules`` they import constants, nothing else."""
    offenders = {module: found for module, tree in _wing_modules() if (found := reaches_past_the_door(tree))}
    assert offenders == {}


def test_the_decision_checks_find_a_wing_that_decides_or_reaches_in() -> None:
    """A made-up wing that writes its own reason, or reads ``runtime._core``, is reported."""
    decided = ast.parse('def f(i, a):\n    return Receipt(False, i, a, None, "identity-conflict")\n')
    assert reasons_decided_in(decided) == ["line 2: 'identity-conflict'"]
    member = ast.parse("self._refuse(conn, now, sid, cid, InstructionRefusal.QUEUE_FULL.value, d)")
    assert reasons_decided_in(member) == ["line 1: InstructionRefusal.QUEUE_FULL"]
    reached = ast.parse("from .._core import SteeringCore, OPEN\nrecord = runtime._core.identities\n")
    assert sorted(reaches_past_the_door(reached)) == ["line 1: SteeringCore", "line 2: ._core"]
