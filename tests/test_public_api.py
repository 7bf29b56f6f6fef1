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
import jaxptx.launch  # noqa: E402
import jaxptx.jax  # noqa: E402
import jaxptx.dsl.declarations  # noqa: E402
import jaxptx.parse  # noqa: E402
import jaxptx.specs  # noqa: E402
import jaxptx.kernels  # noqa: E402
import jaxptx.pyptx  # noqa: E402
import jaxptx.sim  # noqa: E402
import jaxptx.capture  # noqa: E402
import jaxptx.replay  # noqa: E402
from jaxptx.dsl import fragments, pipeline, reduce, tcgen05  # noqa: E402

emit = sys.modules["jaxptx.emit"]   # the package exports the function of that name
check = sys.modules["jaxptx.check"]
MODULES = [jaxptx, dsl, ir, isa, runtime, types, emit, errors, validate, ptx, reg, smem,
           jaxptx.parse, check, jaxptx.codegen, jaxptx.specs, jaxptx.launch, jaxptx.jax,
           jaxptx.kernels, jaxptx.sim, fragments, pipeline, reduce, tcgen05, jaxptx.capture,
           jaxptx.replay]


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


@pytest.mark.parametrize("module", [jaxptx, types, emit, reg, smem, jaxptx.dsl._kernel, check,
                                    jaxptx.specs, jaxptx.launch, jaxptx.jax, jaxptx.dsl.declarations,
                                    jaxptx.kernels, sys.modules["jaxptx.kernels.matmul"], reduce, tcgen05],
                         ids=lambda m: m.__name__)
def test_docstring_examples_run(module) -> None:
    import doctest
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def _fresh(code: str) -> str:
    import subprocess
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_a_plain_import_reaches_the_emulator_without_loading_it_first() -> None:
    out = _fresh("import sys, jaxptx; print('jaxptx.sim' in sys.modules, 'jax' in sys.modules); "
                 "print(jaxptx.sim.launch.__module__, jaxptx.codegen.__name__)")
    assert out.splitlines() == ["False False", "jaxptx.sim.launch jaxptx.codegen"]


def test_the_seed_module_path_for_specs() -> None:
    out = _fresh("from jaxptx.specs import Layout, Tile, unify_envs; import jaxptx; "
                 "print(Tile is jaxptx.Tile, Layout is jaxptx.Layout, unify_envs is jaxptx.unify_envs)")
    assert out == "True True True"


def test_an_unknown_attribute_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'jaxptx' has no attribute 'nope'"):
        jaxptx.nope  # noqa: B018
