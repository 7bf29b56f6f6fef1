"""No package reaches into another package's private names (STYLE.md §2:
"Each package has one file that re-exports its public names explicitly ...
Everything else is private").

A package is a subpackage of ``jaxptx`` (``jaxptx.dsl``, ``jaxptx.sim``), or
the top level itself for the modules beside them (``jaxptx.check`` and its
private ``jaxptx._check_rules``). Read with ``ast``, without importing anything, a crossing is:

* an import of a private module or name of another package
  (``from jaxptx.dsl._core import Reg``, ``from ..sim.launch import _x``);
* an attribute chain from a module of another package to a private name
  (``semantics.bulk_copy._box``);
* a private attribute of an object (not ``self``/``cls``), read or written,
  that only another package's classes define (``kernel._tensors`` outside
  ``jaxptx.dsl``);
* in a class whose base comes from another package, a private hook of that
  base overridden, or reached through ``self``/``super()``
  (``def _trace`` in a subclass of ``jaxptx.dsl.Kernel``).

Ground modules that every layer may import (the compiled FFI shim, the one
place that names JAX internals, the ``vprintf`` format shared by the DSL
and the emulator) are allowed.
"""

from __future__ import annotations

import ast
import collections
import functools
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "jaxptx"

# Private top-level modules meant to be shared by every layer.
GROUND = {"jaxptx._ffi", "jaxptx._jax_private", "jaxptx._vprintf"}

def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str, subpackages: frozenset[str]) -> str:
    """``jaxptx.dsl._core`` -> ``dsl``; a top-level module (``jaxptx.check``,
    ``jaxptx._check_rules``) -> ``""``, the top-level package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in subpackages else ""


def _crosses(here: str, target: str, subpackages: frozenset[str]) -> bool:
    """Whether dotted ``target`` is a private name of another package than
    the one module ``here`` belongs to."""
    if not target.startswith("jaxptx.") or _package(target, subpackages) == _package(here, subpackages):
        return False
    parts = target.split(".")
    for i in range(1, len(parts)):
        if ".".join(parts[:i + 1]) in GROUND:
            return False
        # `cp.async_.bulk.tensor._3d`: a PTX modifier spelled for Python, not a private name
        if _private(parts[i]) and not parts[i][1:2].isdigit():
            return True
    return False


class _File:
    def __init__(self, path: pathlib.Path, root: pathlib.Path, subpackages: frozenset[str]) -> None:
        self.path = path
        self.rel = path.relative_to(root.parent).as_posix()
        self.module = _module_name(path, root)
        self.subpackages = subpackages
        self.package = _package(self.module, subpackages)
        self.tree = ast.parse(path.read_text(), str(path))
        self.aliases: dict[str, str] = {}      # local name -> dotted jaxptx name
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom):
                source = self.resolve(node)
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{source}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]

    def resolve(self, node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        base = self.module.split(".")
        if self.path.name != "__init__.py":
            base = base[:-1]
        base = base[:len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def dotted(self, node: ast.expr) -> str | None:
        """``a.b.c`` with ``a`` resolved through the imports, else None."""
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(chain)])


def _files(root: pathlib.Path = ROOT) -> list[_File]:
    subpackages = frozenset(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
    return [_File(p, root, subpackages) for p in sorted(root.rglob("*.py"))]


def _class_attributes(files: list[_File]) -> dict[tuple[str, str], set[str]]:
    """Private attribute names of each class, by (package, class name):
    class-body names, ``self.x = ...`` in its methods, and what its bases
    in the same package define."""
    own: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    bases: dict[tuple[str, str], list[str]] = {}
    for f in files:
        for cls in (n for n in ast.walk(f.tree) if isinstance(n, ast.ClassDef)):
            key = (f.package, cls.name)
            names = own[key]
            bases[key] = [b.id if isinstance(b, ast.Name) else b.attr for b in cls.bases
                          if isinstance(b, (ast.Name, ast.Attribute)) and not _foreign(f, b)]
            for item in cls.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(item.name)
                elif isinstance(item, ast.Assign):
                    names.update(t.id for t in item.targets if isinstance(t, ast.Name))
                    if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets):
                        names.update(e.value for e in ast.walk(item.value)
                                     if isinstance(e, ast.Constant) and isinstance(e.value, str))
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
            for node in ast.walk(cls):
                if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                        and isinstance(node.value, ast.Name) and node.value.id == "self"):
                    names.add(node.attr)

    def closure(key: tuple[str, str], seen: frozenset = frozenset()) -> set[str]:
        out = {n for n in own.get(key, ()) if _private(n)}
        for b in bases.get(key, ()):
            if (key[0], b) not in seen | {key}:
                out |= closure((key[0], b), seen | {key})
        return out

    return {key: closure(key) for key in own}


def _foreign(f: _File, base: ast.expr) -> str | None:
    """``base`` as (package, class name) when it comes from another jaxptx
    package, else None."""
    name = f.dotted(base)
    if name and name.startswith("jaxptx.") and _package(name, f.subpackages) != f.package:
        return name
    return None


def _is_self(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "super")


def _crossings(files: list[_File]) -> list[tuple[str, int, str]]:
    """(file, line, what) for every crossing in ``files``."""
    classes = _class_attributes(files)
    by_package: dict[str, set[str]] = collections.defaultdict(set)
    for f in files:
        for cls in (n for n in ast.walk(f.tree) if isinstance(n, ast.ClassDef)):
            if not any(_foreign(f, b) for b in cls.bases):   # a subclass's names may be its base's
                by_package[f.package] |= classes[(f.package, cls.name)]
    found = []

    def others(package: str, name: str) -> bool:
        return name not in by_package[package] and any(
            name in names for p, names in by_package.items() if p != package)

    for f in files:
        def add(node: ast.AST, what: str) -> None:
            found.append((f.rel, node.lineno, what))

        for node in ast.walk(f.tree):
            if isinstance(node, ast.ImportFrom):
                source = f.resolve(node)
                for a in node.names:
                    if _crosses(f.module, f"{source}.{a.name}", f.subpackages):
                        add(node, f"from {source} import {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if _crosses(f.module, a.name, f.subpackages):
                        add(node, f"import {a.name}")
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                name = f.dotted(node)
                if name is not None:
                    if _crosses(f.module, name, f.subpackages):
                        add(node, name)
                elif not _is_self(node.value) and others(f.package, node.attr):
                    add(node, f".{node.attr}")
        for cls in (n for n in ast.walk(f.tree) if isinstance(n, ast.ClassDef)):
            inherited: set[str] = set()
            for b in cls.bases:
                name = _foreign(f, b)
                if name:
                    inherited |= classes.get((_package(name, f.subpackages), name.rsplit(".", 1)[-1]),
                                             set())
            for item in cls.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in inherited:
                    add(item, f"def {cls.name}.{item.name} (overrides a private hook)")
            for node in ast.walk(cls):
                if (isinstance(node, ast.Attribute) and node.attr in inherited
                        and _is_self(node.value)):
                    add(node, f"self.{node.attr} in {cls.name}")
    return found


@functools.cache
def _found() -> tuple[tuple[str, int, str], ...]:
    """The crossings in jaxptx (parsed once for both tests)."""
    return tuple(_crossings(_files()))


def test_no_private_name_crosses_a_package() -> None:
    found = list(_found())
    listing = "\n".join(f"  {path}:{line}: {what}" for path, line, what in sorted(found))
    assert not found, (f"{len(found)} private name(s) of another package; export a public name "
                       f"from that package's __init__ and use it:\n{listing}")


def test_the_check_finds_each_kind_of_crossing(tmp_path: pathlib.Path) -> None:
    """The scan is not vacuous: each rule flags a planted example, and what
    is allowed (ground modules, a top-level module's private neighbour, a
    package's own privates) is not flagged."""
    pkg = tmp_path / "jaxptx"
    for sub in ("dsl", "other"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "_rules.py").write_text("def rule(): pass\n")
    (pkg / "check.py").write_text("from ._rules import rule\n")
    (pkg / "dsl" / "_core.py").write_text(
        "class Reg:\n    def _hook(self): pass\n    def __init__(self): self._state = 1\n")
    (pkg / "dsl" / "kernel.py").write_text("from ._core import Reg\ndef f(r): return r._state\n")
    (pkg / "other" / "mod.py").write_text(
        "from ..dsl._core import Reg\n"
        "from ..dsl import _core\n"
        "from jaxptx._ffi import x\n"
        "from .._rules import rule\n"
        "import jaxptx.dsl._core as core\n"
        "def f(k): return k._state, core._private_fn\n"
        "class Mine(Reg):\n"
        "    def _hook(self): return super()._hook()\n")
    found = {(path, what) for path, _, what in _crossings(_files(pkg))}
    mod = "jaxptx/other/mod.py"
    assert found == {
        (mod, "from jaxptx.dsl._core import Reg"),
        (mod, "from jaxptx.dsl import _core"),
        (mod, "from jaxptx._rules import rule"),
        (mod, "import jaxptx.dsl._core"),
        (mod, "jaxptx.dsl._core._private_fn"),
        (mod, "._state"),
        (mod, "def Mine._hook (overrides a private hook)"),
        (mod, "self._hook in Mine"),
    }
