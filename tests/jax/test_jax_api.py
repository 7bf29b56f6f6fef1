"""The public names of jaxptx.jax: documented, and their examples run."""

from __future__ import annotations

import doctest
import inspect

import jaxptx
import jaxptx.jax


def test_public_names_have_docstrings():
    for name in jaxptx.jax.__all__:
        assert inspect.getdoc(getattr(jaxptx.jax, name)), name
    assert jaxptx.custom_vjp is jaxptx.jax.custom_vjp
    assert inspect.getdoc(jaxptx.Kernel.__call__)


def test_docstring_examples_run():
    result = doctest.testmod(jaxptx.jax, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_star_import_does_not_shadow_jax():
    namespace: dict = {}
    exec("import jax\nfrom jaxptx import *", namespace)
    assert namespace["jax"].__name__ == "jax"
    assert "custom_vjp" in namespace and "kernel" in namespace
