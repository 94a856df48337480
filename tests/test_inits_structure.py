"""pipeline.method.inits imports point one way: no cycle between its modules, every import at the top of its file."""

from __future__ import annotations

import ast
from pathlib import Path

import pipeline.method.inits

PACKAGE = Path(pipeline.method.inits.__file__).parent


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def internal_imports(tree: ast.Module) -> set[str]:
    """Modules of pipeline.method.inits that a module imports (at any depth)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipeline.method.inits."):
            found.add(node.module.removeprefix("pipeline.method.inits."))
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
            found |= {n.removeprefix("pipeline.method.inits.") for n in names if n.startswith("pipeline.method.inits.")}
    return found


def optional_imports(tree: ast.Module) -> set[int]:
    """The imports of module-level `try: import x ... except ImportError:` blocks: optional dependencies."""
    return {id(n) for node in tree.body if isinstance(node, ast.Try)
            and any(isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                    for h in node.handlers)
            for n in node.body if isinstance(n, ast.Import | ast.ImportFrom)}


def test_no_function_level_imports():
    """Every import at the top of its module (an optional dependency's in a module-level try/except ImportError)."""
    nested = []
    for path in sorted(PACKAGE.glob("*.py")):
        tree = parse(path)
        top = {id(node) for node in tree.body} | optional_imports(tree)
        nested += [f"{path.name}:{n.lineno}" for n in ast.walk(tree)
                   if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in top]  # fmt: skip
    assert not nested, f"imports inside functions or blocks: {nested}"


def test_import_graph_has_no_cycle():
    graph = {p.stem: internal_imports(parse(p)) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert all(dep in graph for deps in graph.values() for dep in deps), graph
    done, path = set(), []

    def visit(module):
        if module in path:
            raise AssertionError(f"import cycle: {' -> '.join(path[path.index(module) :] + [module])}")
        if module in done:
            return
        path.append(module)
        for dep in sorted(graph[module]):
            visit(dep)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    assert len(done) == len(graph) >= 10
