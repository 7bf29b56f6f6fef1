"""jaxptx.viz as a package: importing it does not import matplotlib, every
public name has a docstring and type hints, the module's example runs."""

from __future__ import annotations

import doctest
import inspect
import subprocess
import sys

import pytest

import jaxptx.viz as viz


def test_import_does_not_load_matplotlib() -> None:
    code = "import sys, jaxptx.viz; assert 'matplotlib' not in sys.modules, 'eager'; print('OK')"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "OK", run.stderr


@pytest.mark.parametrize("name", viz.__all__)
def test_public_names_have_docstrings_and_hints(name: str) -> None:
    obj = getattr(viz, name)
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return
    assert (obj.__doc__ or "").strip(), name
    if inspect.isfunction(obj):
        hints = obj.__annotations__
        params = [p for p in inspect.signature(obj).parameters.values() if p.kind != p.VAR_KEYWORD]
        assert "return" in hints and all(p.name in hints for p in params), name


def test_module_example() -> None:
    pytest.importorskip("matplotlib")
    failures, tried = doctest.testmod(viz, verbose=False)
    assert tried > 0 and failures == 0
