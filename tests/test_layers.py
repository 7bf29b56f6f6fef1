"""The import layers of jaxptx (DESIGN.md's layer table), held by reading every
module's imports with ``ast``: those at module level and those inside
functions alike, so that an import moved into a function to dodge a cycle
still counts.

Layers, bottom to top (a module may import its own layer or a lower one):

* ground: ``types``, ``errors``, ``ir``, ``isa``, ``launch``, ``_vprintf``,
  ``_jax_private``, ``capture`` and the compiled ``_ffi``;
* text: ``emit``, ``parse``, ``validate``, ``check`` (and its ``_check_*`` parts);
* runtime: PTX -> cubin, module images, the toolchain. It sits below the DSL
  (``Kernel.sass()`` and ``detect_arch`` use it), and knows nothing of tracing;
* dsl, then sim, then jax;
* top: ``kernels``, ``profile``, ``viz``, ``pyptx``, ``torch``, ``codegen``,
  ``specs``, ``replay``, ``triton``;
* testing: test doubles, above all of the product; nothing in the product
  imports it.

The root package ``jaxptx/__init__.py`` only re-exports, and is exempt as an
importer; ``from jaxptx import name`` counts as importing the module that
the root re-exports ``name`` from.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from collections.abc import Iterator

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "jaxptx"

LAYERS = (
    ("ground", ("types", "errors", "ir", "isa", "launch", "_vprintf", "_jax_private", "capture",
                "_ffi")),
    ("text", ("emit", "parse", "validate", "check", "_check_rules", "_check_body")),
    ("runtime", ("runtime",)),
    ("dsl", ("dsl",)),
    ("sim", ("sim",)),
    ("jax", ("jax",)),
    ("top", ("kernels", "profile", "viz", "pyptx", "torch", "codegen", "specs", "replay",
             "triton")),
    ("testing", ("testing",)),
)
LAYER_OF = {part: (rank, name) for rank, (name, parts) in enumerate(LAYERS) for part in parts}


def module_name(path: pathlib.Path) -> str:
    """``jaxptx.sim.device`` for ``jaxptx/sim/device.py`` (a package for its ``__init__``)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, pathlib.Path]:
    """Every module of the package by dotted name."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


def is_module(name: str) -> bool:
    """Whether ``name`` (dotted) is a module or package of jaxptx, or its extension."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() or \
        name == "jaxptx._ffi"


def root_exports() -> dict[str, str]:
    """What ``jaxptx/__init__.py`` re-exports: ``{name: the module it comes from}``."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                out[alias.asname or alias.name] = f"jaxptx.{node.module}" if node.module else \
                    f"jaxptx.{alias.name}"
    return out


class Import:
    """One import statement's target: ``module`` (dotted) at ``line`` of ``source``;
    ``top_level`` when it runs at import time (not inside a function)."""

    def __init__(self, source: str, line: int, module: str, top_level: bool) -> None:
        self.source, self.line, self.module, self.top_level = source, line, module, top_level


def _import_nodes(tree: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement under ``tree``, with whether it sits in a function."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        elif isinstance(node, (ast.stmt, ast.excepthandler, ast.match_case)):  # not expressions
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            yield from _import_nodes(node, inner)


def imports(name: str, path: pathlib.Path, exports: dict[str, str]) -> Iterator[Import]:
    """The jaxptx modules that module ``name`` imports, anywhere in it."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node, in_function in _import_nodes(tree):
        top = not in_function
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "jaxptx":
                    yield Import(name, node.lineno, alias.name, top)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if base.split(".")[0] != "jaxptx":
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if is_module(target):
                    yield Import(name, node.lineno, target, top)
                elif base == "jaxptx":
                    yield Import(name, node.lineno, exports.get(alias.name, "jaxptx"), top)
                else:
                    yield Import(name, node.lineno, base, top)


@functools.cache
def all_imports() -> dict[str, tuple[Import, ...]]:
    """Every module's jaxptx imports, read once for the tests below."""
    exports = root_exports()
    return {name: tuple(imports(name, path, exports)) for name, path in modules().items()}


def layer(module: str) -> tuple[int, str] | None:
    """``(rank, layer name)`` of a jaxptx module; None for the root package."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    if parts[1] not in LAYER_OF:
        raise AssertionError(f"{module} is in no layer of tests/test_layers.py's table; add "
                             f"jaxptx.{parts[1]} to the layer it belongs to")
    return LAYER_OF[parts[1]]


def violations() -> list[str]:
    """Each import of a higher layer, as ``module:line imports X (layer a above layer b)``."""
    found = []
    for name, found_imports in all_imports().items():
        mine = layer(name)
        if mine is None:
            continue  # the root package re-exports
        for imp in found_imports:
            theirs = layer(imp.module)
            if theirs is not None and theirs[0] > mine[0]:
                found.append(f"{name}:{imp.line} imports {imp.module} "
                             f"(layer {theirs[1]} above layer {mine[1]})")
    return found


def test_every_module_imports_only_its_own_layer_or_lower():
    found = violations()
    assert not found, f"{len(found)} imports go up the layers:\n" + "\n".join(found)


def test_nothing_in_the_product_imports_the_testing_layer():
    found = [f"{imp.source}:{imp.line} imports {imp.module}"
             for name, found_imports in all_imports().items()
             if not name.startswith("jaxptx.testing")
             for imp in found_imports if imp.module.startswith("jaxptx.testing")]
    assert not found, "\n".join(found)


def test_the_layer_test_sees_imports_inside_functions_and_through_the_root(tmp_path):
    """The reader itself: a function-level import, a relative one and a name
    the root re-exports are all found (else the tests above prove nothing)."""
    path = tmp_path / "probe.py"
    path.write_text("from .. import sim\n"
                    "def f():\n"
                    "    from jaxptx import kernel\n"
                    "    import jaxptx.profile.report\n")
    found = [(i.line, i.module, i.top_level)
             for i in imports("jaxptx.runtime.probe", path, root_exports())]
    assert found == [(1, "jaxptx.sim", True), (3, "jaxptx.dsl", False),
                     (4, "jaxptx.profile.report", False)]
    with pytest.raises(AssertionError, match=r"jaxptx\.nowhere\.x is in no layer"):
        layer("jaxptx.nowhere.x")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_emulator_has_no_import_cycle_at_module_level():
    """Among ``jaxptx.sim``'s modules, the imports outside functions form no
    cycle, ``if TYPE_CHECKING:`` ones included (a cycle is a layering bug:
    move the shared piece down; semantics, observers and the scheduler's
    helpers meet through ``MachineView``). ``from . import x`` is an edge to
    module x; ``from .p import name`` an edge to p."""
    graph: dict[str, set[str]] = {}
    lines: dict[tuple[str, str], int] = {}
    for name, found_imports in all_imports().items():
        if not name.startswith("jaxptx.sim"):
            continue
        for imp in found_imports:
            if imp.top_level and imp.module.startswith("jaxptx.sim") and imp.module != name:
                graph.setdefault(name, set()).add(imp.module)
                lines.setdefault((name, imp.module), imp.line)
    cycles = _cycles(graph)
    described = ["cycle: " + ", ".join(
        f"{a}:{lines[(a, b)]} -> {b}" for a in c for b in sorted(graph[a]) if b in c) for c in cycles]
    assert not cycles, f"{len(cycles)} import cycles in jaxptx.sim:\n" + "\n".join(described)
