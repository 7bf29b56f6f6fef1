"""Every public name of every package carries a docstring, and the package
re-exports import cleanly without a GPU."""

from __future__ import annotations

import inspect

import pytest

import sys

import jaxptx
from jaxptx import dsl, errors, ir, isa, runtime, types, validate
from jaxptx.dsl import ptx, reg, smem

import jaxptx.codegen  # noqa: E402
import jaxptx.parse  # noqa: E402

emit = sys.modules["jaxptx.emit"]   # the package exports the function of that name
check = sys.modules["jaxptx.check"]
MODULES = [jaxptx, dsl, ir, isa, runtime, types, emit, errors, validate, ptx, reg, smem,
           jaxptx.parse, check, jaxptx.codegen]


def _public(module):
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    for name in names:
        obj = getattr(module, name)
        if inspect.ismodule(obj) or not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        yield f"{module.__name__}.{name}", obj


@pytest.mark.parametrize("qualname, obj", [p for m in MODULES for p in _public(m)],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_public_names_have_docstrings(qualname, obj) -> None:
    assert inspect.getdoc(obj), f"{qualname} has no docstring"


def test_import_needs_no_gpu_and_arch_auto_is_lazy() -> None:
    k = jaxptx.kernel(arch="auto")(lambda: None)
    assert k.arch == "auto"


@pytest.mark.parametrize("module", [jaxptx, types, emit, reg, smem, jaxptx.dsl._kernel, check],
                         ids=lambda m: m.__name__)
def test_docstring_examples_run(module) -> None:
    import doctest
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
