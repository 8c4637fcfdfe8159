"""The package layering of docs/architecture.md, checked on the source: imports run one way.

Every `import` and `from ... import` is counted, at module level or inside a function,
so an import hidden in a function cannot close a cycle either.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
# Lowest first. A package may import packages of lower layers only (docs/architecture.md).
LAYERS: list[set[str]] = [
    {"judge"},  # the one judge of differences: the standard library only, below everything
    {"errors", "measured", "memory_peaks", "contention", "terminal", "private_api"},
    {"config", "reports", "instrument"},
    {"result"},
    {"launch", "workload", "autotune"},  # autotune: the search core and its readers
    {"profilers", "tracking", "sweep"},
    {"run"},
    {"cli_errors"},
    {"session"},  # ProfileSession: uses cli_errors; `harness.ProfileSession` loads it lazily
    {"cli", "harness"},
]
LAUNCHER_PLUGIN = "hydra_plugins"  # the Hydra launcher plugin, outside the harness package


def _package(module: str) -> str | None:
    """'harness.run.job' -> 'run'; 'harness.cli' -> 'cli'; 'harness' -> 'harness'."""
    parts = module.split(".")
    if parts[0] == "hydra_plugins" and len(parts) > 1 and parts[1] == "harness_launcher":
        return LAUNCHER_PLUGIN
    if parts[0] != "harness":
        return None
    return parts[1] if len(parts) > 1 else "harness"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    module = _module_name(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")[: -node.level or None]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target != "harness":  # `from harness import x`: only x counts
                found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def package_graph() -> dict[str, set[str]]:
    """Package -> the other harness packages it imports."""
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        source = _package(_module_name(path))
        if source is None:
            continue
        targets = {_package(name) for name in _imports(path)} - {None, source}
        graph.setdefault(source, set()).update(t for t in targets if t in _all_packages())
    return graph


def _all_packages() -> set[str]:
    return {_package(_module_name(p)) for p in SRC.rglob("*.py")} - {None}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path + [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found[found.index(found[-1]):]
    return None


def test_package_imports_are_acyclic():
    graph = package_graph()
    assert {"run", "sweep", "tracking", "profilers", "launch", "result"} <= set(graph)
    assert _cycle(graph) is None, f"import cycle between packages: {' -> '.join(_cycle(graph))}"


def test_packages_import_only_lower_layers():
    layer = {name: n for n, names in enumerate(LAYERS) for name in names}
    layer[LAUNCHER_PLUGIN] = len(LAYERS)
    graph = package_graph()
    unknown = set(graph) - set(layer)
    assert not unknown, f"packages missing from LAYERS (and docs/architecture.md): {unknown}"
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if layer[b] >= layer[a])
    assert not upward, f"imports against the layering: {upward}"


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def module_graph() -> dict[str, set[str]]:
    """Module -> the harness modules it imports (`from harness.a import b` counts harness.a.b
    when b is a module, else harness.a)."""
    modules = {_module_name(p) for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        source = _module_name(path)
        targets = set()
        for name in _imports(path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != source and name not in _ancestors(source):
                targets.add(name)
        graph[source] = targets
    return graph


def _ancestors(module: str) -> set[str]:
    """The packages a module sits in: importing one of them runs its __init__, no cycle."""
    parts = module.split(".")
    return {".".join(parts[:n]) for n in range(1, len(parts))}


def test_modules_import_each_other_without_cycles():
    graph = module_graph()
    assert {"harness.cli", "harness.run.job", "harness.config.overrides"} <= set(graph)
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle between modules: {' -> '.join(cycle)}"
