"""The layout docs/architecture.md describes holds: no import cycles, no oversized module.

Pure static checks (``ast``, no imports executed, no database): every import statement of
the project's packages counts, including imports inside functions and under
``TYPE_CHECKING`` (a lazy or type-only import back into a module that imports you is still
a cycle in the design, only hidden from the interpreter).
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("fleet_agent", "fleet", "audit", "alerts", "advice", "front", "config", "demo")
MAX_LINES = 800  # project rule: modules under ~800 lines


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py of :data:`PACKAGES` (migrations excluded)."""
    modules = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom,
             modules: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            if path.name != "__init__.py":
                parts = parts[:-1]
            parts = parts[:len(parts) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                 for a in node.names]
    found = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module and not module.startswith(name + "."):
            found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports anywhere in its body."""
    modules = project_modules()
    graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[module] = set().union(*(
            _targets(module, path, node, modules) for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_walker_sees_lazy_and_type_only_imports() -> None:
    graph = import_graph()
    assert "fleet_agent.schema" in graph["fleet.api"]
    assert len(graph) > 100


def test_the_project_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_node_agent_imports_nothing_of_the_server() -> None:
    graph = import_graph()
    leaks = {m: sorted(d for d in deps if not d.startswith("fleet_agent"))
             for m, deps in graph.items() if m.startswith("fleet_agent")}
    assert {m: d for m, d in leaks.items() if d} == {}


def test_no_module_is_over_800_lines() -> None:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split()
    long = {name: n for name in tracked
            if (n := len((REPO / name).read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


#: App -> the other top-level packages it may import (docs/architecture.md, "Layering").
#: ``audit.kb`` is the knowledge base's pure library (no Django): ingest and the demo use it.
MAY_IMPORT = {
    "fleet_agent": set(),
    "fleet": {"fleet_agent", "audit.kb"},
    "audit": {"fleet", "fleet_agent"},
    "alerts": {"audit", "fleet", "fleet_agent"},
    "advice": {"audit", "fleet", "fleet_agent"},
    "front": {"fleet", "fleet_agent", "audit", "alerts", "advice"},
    "demo": {"fleet_agent", "audit.kb"},
    "demo.management": {"fleet", "fleet_agent", "audit", "alerts", "demo"},
}


def _owner(module: str) -> str:
    return "demo.management" if module.startswith("demo.management") else module.split(".")[0]


def _allowed(target: str, allowed: set[str]) -> bool:
    return any(target == a or target.startswith(a + ".") for a in allowed)


def test_dependencies_point_one_way_and_nothing_imports_the_pages() -> None:
    wrong = []
    for module, deps in import_graph().items():
        owner = _owner(module)
        if owner == "config":
            continue
        for target in deps:
            if target.split(".")[0] == module.split(".")[0] and owner != "demo.management":
                continue
            if not _allowed(target, MAY_IMPORT[owner]):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


# --- the demo package as the agent tests' fake fleet -------------------------------
AGENT_TESTS = REPO / "tests" / "agent"
#: Third-party packages of the dashboard (pyproject ``server`` extra): the agent installs
#: without them, so nothing the agent tests import from ``demo`` may need them.
SERVER_PACKAGES = {"django", "celery", "kombu", "redis", "psycopg", "psycopg2", "ninja",
                   "dj_database_url", "whitenoise", "django_htmx", "gunicorn"}
#: Project packages the agent tests may reach through ``demo`` (the rest is the dashboard).
AGENT_SIDE = ("demo", "fleet_agent")


def _imported_names(path: Path) -> set[str]:
    """Absolute dotted names imported anywhere in ``path`` (relative imports skipped)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _reach(start: set[str]) -> tuple[set[str], set[str]]:
    """Project modules reachable from ``start`` and the third-party top-level packages they
    import (``(project, external)``)."""
    modules = project_modules()
    graph = import_graph()
    seen, todo = set(), [m for m in start if m in modules]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module] - seen)
    external = {name.split(".")[0] for m in seen for name in _imported_names(modules[m])}
    return seen, external - {p.split(".")[0] for p in modules}


def _demo_modules_of_the_agent_tests() -> set[str]:
    modules = project_modules()
    return {name for path in AGENT_TESTS.glob("*.py") for name in _imported_names(path)
            if name.split(".")[0] == "demo" and name in modules}


def test_the_reach_check_sees_a_server_package_behind_demo() -> None:
    project, external = _reach({"demo.management.commands.simulate_fleet"})
    assert "django" in external and any(m.startswith("fleet.") for m in project)


def test_the_agent_tests_use_the_demo_emulator_case_loader_and_fake_node() -> None:
    assert {"demo.emulator", "demo.cases", "demo.procnode"} <= _demo_modules_of_the_agent_tests()


def test_what_the_agent_tests_import_from_demo_needs_no_server_package() -> None:
    project, external = _reach(_demo_modules_of_the_agent_tests())
    assert sorted(m for m in project if not m.startswith(AGENT_SIDE)
                  or m.startswith("demo.management")) == []
    assert sorted(external & SERVER_PACKAGES) == []


def test_the_agent_tests_keep_no_emulator_or_case_loader_of_their_own() -> None:
    """One vLLM emulator and one case loader (``demo.emulator``, ``demo.cases``): a second copy
    under tests/agent (a module, or a class or function of the same role) fails here."""
    own = {}
    for path in AGENT_TESTS.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = [n.name for n in tree.body
                 if isinstance(n, ast.ClassDef | ast.FunctionDef)
                 and (n.name.endswith(("Emulator", "Behaviour"))
                      or n.name in {"load_cases", "load_case", "case_version", "split_docker",
                                    "place_cases", "build_case_node", "add_case"})]
        if names or "emulator" in path.stem or path.stem.endswith("cases"):
            own[path.name] = names
    assert own == {}
