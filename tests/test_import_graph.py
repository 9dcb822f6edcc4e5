"""The engine's modules import one another in layers, without a circle.

`engine.config` is the floor: every layer reads it, so it may import only the standard library and
the modules below every layer (the wire constants of `engine.links`, which imports nothing of the
engine but `engine.eventlist` and `engine.units`; and the backends' names, `engine.backends.names`,
which imports nothing). A circle through it (as when it imported the workload readers, which import
the system layer, which imports it; or the registry's package, whose loader imports every backend,
which imports it) only holds together through imports made at call time, so the graph below counts
those too: imports inside functions, and `importlib.import_module` (a module name built from
`__name__` imports every module of that package).

No module imports another's private name (`from engine.config import _require`): what one module
needs of another is public, so a module's private names can change without looking elsewhere.

The graph is read from the source files with `ast`, not by importing them: importing any engine
module first runs `engine/__init__.py`, which imports every layer for the package's API, so a
fresh interpreter's `sys.modules` cannot tell what `engine.config` itself needs. Edges to that
facade, and the implicit import of a module's parent packages, are not counted (Python runs a
package's `__init__` before its modules; neither is an import a module chose).
"""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE_DIR = Path(__file__).resolve().parent.parent / "engine"
# What engine.config may import, besides the standard library (see the module docstring).
CONFIG_FLOOR = {"engine.links", "engine.eventlist", "engine.units", "engine.backends.names"}
PROJECT_DIR = ENGINE_DIR.parent
# The project's packages whose modules must not import one another's private names
PROJECT_PACKAGES = ("engine", "sweep", "hydra_plugins")


def module_name(path: Path) -> str:
    """`engine/system/algorithms.py` -> `engine.system.algorithms`; a package's `__init__.py` -> the package."""
    parts = path.relative_to(ENGINE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Every engine module -> the engine modules it imports anywhere in its source (functions too, and
    through `importlib.import_module`), except under `if TYPE_CHECKING:`, which names types for the
    checker and never runs."""
    modules = {module_name(path): path for path in ENGINE_DIR.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for block in ast.walk(tree):
            if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                block.body = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)  # `from . import module`
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module"):
                targets.update(dynamic_targets(node, name, package, modules))
        graph[name] = {target for target in targets if target in modules and target not in ("engine", name)}
    return graph


def dynamic_targets(call: ast.Call, name: str, package: str, modules: dict[str, Path]) -> set[str]:
    """The modules an `import_module(...)` call in module `name` can import: the one a constant names,
    or every module of the package when the name is built on `__name__` (`f"{__name__}.{backend}"`)."""
    argument = call.args[0]
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return {argument.value}
    first = argument.values[0] if isinstance(argument, ast.JoinedStr) and argument.values else None
    if isinstance(first, ast.FormattedValue) and ast.unparse(first.value) == "__name__":
        return {module for module in modules if module.startswith(f"{package}.")}
    raise AssertionError(f"{name}: import_module({ast.unparse(argument)}) names no module the test can follow")


def private_imports() -> list[str]:
    """`file:line module._name` for every import of another project module's private name."""
    found = []
    for package in PROJECT_PACKAGES:
        for path in (PROJECT_DIR / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").split(".")[0]
                                                                in PROJECT_PACKAGES):
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(PROJECT_DIR)}:{node.lineno} {node.module}.{alias.name}")
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_graph_is_read_from_the_sources() -> None:
    """The reader sees relative, nested and function-level imports (else a clean result would mean nothing)."""
    graph = import_graph()
    assert "engine.config" in graph["engine.system.algorithms"]  # `from ..config import ...`
    assert "engine.system.collectives" in graph["engine.workload.chakra"]  # `from ..system.collectives import ...`
    assert "engine.workload.chakra_schema" in graph["engine.workload.chakra"]  # imported inside a function
    assert "engine.simulation" not in graph["engine.backends.base"]  # only under `if TYPE_CHECKING:`
    assert "engine.backends.hybrid" in graph["engine.backends"]  # `import_module(f"{__name__}.{name}")`


def test_a_circle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_engine_modules_import_each_other_in_a_circle() -> None:
    assert find_cycle(import_graph()) is None


def test_config_is_the_floor() -> None:
    assert reachable(import_graph(), "engine.config") <= CONFIG_FLOOR


def test_no_module_imports_another_modules_private_name() -> None:
    assert private_imports() == []
