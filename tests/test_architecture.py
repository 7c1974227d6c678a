"""The package's layers point one way, and no module imports itself back through others.

base (errors, rng, arrays, ...) <- trace <- engine <- models <- analysis <- application (api and
the commands' libraries) <- cli.  docs/architecture.md draws the same picture.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "replay"

# Layer of each module or package, lowest first; a module imports only from its own layer or below.
LAYERS = (
    ("base", ("replay", "replay.errors", "replay.rng", "replay.arrays", "replay.atomic",
              "replay.outputs", "replay.limits", "replay.workers", "replay.interrupts",
              "replay.progress", "replay.quantity", "replay.times", "replay.jit",
              "replay.memory", "replay.parquetparts")),
    ("trace", ("replay.trace",)),
    ("engine", ("replay.engine",)),
    ("models", ("replay.models",)),
    ("analysis", ("replay.analysis", "replay.queries")),
    ("application", ("replay.api", "replay.calibrate", "replay.report", "replay.sweep",
                     "replay.forkserver", "replay.reproduce")),
    ("cli", ("replay.cli", "replay.__main__")),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    """The layer of ``module``: that of the longest prefix listed in LAYERS."""
    best, rank = -1, None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    if rank is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return rank


def imports_of(path: Path) -> set[str]:
    """The replay modules that ``path`` imports, at any depth of its code."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name == "replay" or name.startswith("replay.")}


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {i for i in imports_of(path) if i in modules and i != name}
            for name, path in modules.items()}


def test_every_import_points_down_or_sideways():
    upward = sorted(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} "
                    f"({LAYERS[layer_of(target)][0]})"
                    for module, targets in graph().items() for target in targets
                    if target != "replay" and layer_of(target) > layer_of(module))
    assert upward == []


def test_no_import_cycles():
    edges = graph()
    # a package's __init__ is imported by each of its modules; that edge is not a dependency
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in edges.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target] if target in path
                              else [node, target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert cycles == []


@pytest.mark.parametrize("module", ["replay.engine.scheduler", "replay.models.godel"])
def test_the_layer_check_sees_an_upward_edge(module, monkeypatch):
    """The check itself can fail: a made-up import from the CLI is an upward edge."""
    real = imports_of

    def with_cli(path: Path) -> set[str]:
        return real(path) | ({"replay.cli.main"} if module_name(path) == module else set())

    monkeypatch.setattr(__import__(__name__), "imports_of", with_cli)
    with pytest.raises(AssertionError):
        test_every_import_points_down_or_sideways()
