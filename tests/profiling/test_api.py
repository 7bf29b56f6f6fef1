"""jaxptx.profile's surface: the callable module, docstrings, doctests,
profiling beside the sanitizer, partial warps, and no cost when off."""

from __future__ import annotations

import doctest
import importlib
import inspect

import numpy as np
import pytest

from jaxptx.profile import api

from profile_cases import COLUMN_READ, row_read, transpose

# (by name: the package's ``occupancy`` is the function of that module)
MODULES = [importlib.import_module(f"jaxptx.profile.{name}") for name in
           ("api", "counters", "mix", "occupancy", "plots", "report", "requests", "roofline", "table")]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_public_names_have_docstrings(module):
    assert inspect.getdoc(module)
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{module.__name__}.{name} has no docstring"


def test_docstring_example_runs():
    result = doctest.testmod(api, optionflags=doctest.ELLIPSIS)
    assert result.attempted and not result.failed


def test_the_package_is_callable():
    import types

    import jaxptx
    import jaxptx.profile as package
    # the package, not the function, is what ``jaxptx.profile`` names
    assert isinstance(jaxptx.profile, types.ModuleType) and jaxptx.profile is package
    assert callable(jaxptx.profile)
    assert package.profile is api.profile
    src = np.arange(32 * 32, dtype=np.float32)
    dst = np.zeros(32, np.float32)
    p = jaxptx.profile(COLUMN_READ, src, dst, block=32, resources=False)
    assert isinstance(p, package.Profile)
    np.testing.assert_array_equal(dst, src.reshape(32, 32)[:, 0])
    assert p.kernel["global_sectors"] == 36


def test_profile_beside_the_sanitizer():
    from jaxptx import sim
    src = np.arange(32 * 32, dtype=np.float32)
    dst = np.zeros_like(src)
    p = sim.launch(transpose(33), src, dst, block=(32, 32), check="all", profile=True)
    assert p.findings == []
    assert p.kernel["shared_bank_conflicts"] == 0
    np.testing.assert_array_equal(dst.reshape(32, 32), src.reshape(32, 32).T)


def test_partial_warps():
    # 48 threads: warp 0 has 32 lanes (128 bytes, 4 sectors), warp 1 has 16 (64 bytes, 2)
    src = np.arange(64, dtype=np.float32)
    dst = np.zeros(64, np.float32)
    p = api.profile(row_read(False, 48), src, dst, block=48, resources=False)
    np.testing.assert_array_equal(dst[:48], src[:48])
    (ld,) = p.find("ld.global")
    assert (ld["executions"], ld["global_requests"], ld["global_sectors"]) == (2, 2, 6)
    assert ld["active_lanes"] == 24


def test_off_by_default():
    from jaxptx import sim
    src = np.arange(32 * 32, dtype=np.float32)
    assert sim.launch(COLUMN_READ, src, np.zeros(32, np.float32), block=32) is None


def test_ptxas_failure_is_reported_not_raised():
    src = np.arange(32 * 32, dtype=np.float32)
    p = api.profile(COLUMN_READ, src, np.zeros(32, np.float32), block=32, resources=False)
    api.attach_resources(p, "not ptx", "sm_80")
    assert "error" in p.resources and p.occupancy is None
