"""Load pyptx's own example modules with only their imports changed to
``jaxptx.pyptx`` (``pyptx.examples.X`` becomes ``_pyptx_examples.X``, loaded
the same way), for ``test_pyptx_examples.py``."""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

PREFIX = "_pyptx_examples"

_IMPORT = re.compile(r"^(\s*)(from|import)\s+(pyptx|examples)(\.examples)?(\b[\w.]*)", re.M)


def rewrite_imports(source: str) -> str:
    """``from pyptx... import`` -> ``from jaxptx.pyptx... import``;
    ``pyptx.examples.X`` / ``examples.X`` -> ``_pyptx_examples.X``. Only
    import lines change."""
    def sub(m: re.Match[str]) -> str:
        indent, kw, root, ex, rest = m.groups()
        if root == "examples" or ex:
            return f"{indent}{kw} {PREFIX}{rest}"
        return f"{indent}{kw} jaxptx.pyptx{rest}"
    return _IMPORT.sub(sub, source)


def examples_dir() -> Path | None:
    """The installed ``pyptx/examples`` folder, or None without pyptx."""
    try:
        spec = importlib.util.find_spec("pyptx")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    d = Path(spec.origin).parent / "examples"
    return d if d.is_dir() else None


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, name, path=None, target=None):  # type: ignore[override]
        if name != PREFIX and not name.startswith(PREFIX + "."):
            return None
        rel = name.split(".")[1:]
        p = self.root.joinpath(*rel)
        if p.is_dir():
            return importlib.util.spec_from_loader(name, self, is_package=True,
                                                   origin=str(p / "__init__.py"))
        if p.with_suffix(".py").is_file():
            return importlib.util.spec_from_loader(name, self, origin=str(p.with_suffix(".py")))
        return None

    def create_module(self, spec):  # type: ignore[override]
        return None

    def exec_module(self, module: ModuleType) -> None:  # type: ignore[override]
        origin = Path(module.__spec__.origin)
        if module.__spec__.submodule_search_locations is not None:
            module.__path__ = [str(origin.parent)]
        src = origin.read_text() if origin.is_file() else ""
        module.__file__ = str(origin)
        with _torch_stub():
            exec(compile(rewrite_imports(src), str(origin), "exec"), module.__dict__)


@contextlib.contextmanager
def _torch_stub():
    """Some examples ``import torch`` at the top for their torch runners;
    their kernel builders do not use it. Without torch, a placeholder
    module stands in while the example loads (and only then)."""
    if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
        yield
        return
    stub = ModuleType("torch")
    stub.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    sys.modules["torch"] = stub
    try:
        yield
    finally:
        sys.modules.pop("torch", None)


def install() -> bool:
    """Make ``_pyptx_examples.*`` importable; False when pyptx is absent."""
    root = examples_dir()
    if root is None:
        return False
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(root))
    return True


def load(name: str) -> ModuleType:
    """The rewritten example ``name`` (``"hopper.rms_norm"``)."""
    return importlib.import_module(f"{PREFIX}.{name}")
