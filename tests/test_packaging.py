"""Packaging that ages well: what pyproject.toml promises, the private JAX
names in one checked list, the driver-struct checks compiled into the build."""

from __future__ import annotations

import importlib.resources
import pathlib
import re
import sys
import tomllib
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def _names(requirements: list[str]) -> dict[str, str]:
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower(): r for r in requirements}


def test_dependencies_name_what_the_code_imports_and_pin_no_compiler_to_a_driver():
    deps = _names(PROJECT["dependencies"])
    assert "cuda-python" not in deps  # the metapackage pulls cuda-core, unused
    assert {"cuda-bindings", "cuda-pathfinder"} <= deps.keys()
    for requirement in PROJECT["dependencies"] + sum(PROJECT["optional-dependencies"].values(), []):
        if requirement.startswith(("nvidia-", "cuda-")):  # the compiler follows the driver at run time
            assert "<" not in requirement.split(";")[0], f"{requirement}: an upper bound (see _compat)"
    used = set()
    for path in (ROOT / "jaxptx").rglob("*.py"):
        used |= set(re.findall(r"^\s*from cuda\.(\w+)", path.read_text(), re.MULTILINE))
    assert used <= {"bindings", "pathfinder"}, used


def test_extras_and_build_requirements():
    extras = PROJECT["optional-dependencies"]
    assert "torch" in _names(extras["torch"])
    build = _names(PYPROJECT["build-system"]["requires"])
    assert "nvidia-cuda-runtime" in build  # it ships cuda.h for ffi/cuda_driver_check.cc


def test_classifiers_cover_the_supported_pythons():
    classifiers = PROJECT["classifiers"]
    assert "Typing :: Typed" in classifiers
    low = tuple(int(x) for x in re.search(r">=\s*(\d+)\.(\d+)", PROJECT["requires-python"]).groups())
    listed = sorted(tuple(int(x) for x in c.rsplit(" ", 1)[1].split("."))
                    for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert listed[0] == low and listed == [(3, m) for m in range(low[1], listed[-1][1] + 1)]
    assert sys.version_info[:2] in listed, "the running Python is not a listed one"
    try:
        from trove_classifiers import classifiers as known
    except ImportError:
        return
    assert set(classifiers) <= known


def test_the_package_is_typed():
    assert importlib.resources.files("jaxptx").joinpath("py.typed").is_file()


def test_the_build_checked_the_driver_declarations_against_cuda_h():
    import jaxptx._ffi as ffi

    assert ffi.abi_info()["checked_against_cuda_h"], \
        "ffi/cuda_driver_check.cc was not compiled: rebuild (pip install -e .)"


def test_private_jax_names_still_hold():
    import jax

    from jaxptx import _jax_private

    problems = _jax_private.problems()
    assert not problems, "JAX changed private names jaxptx uses:\n" + "\n".join(problems)
    if jax.__version__ not in _jax_private.CHECKED_JAX:
        warnings.warn(f"jax {jax.__version__} passes the private-name checks; add it to "
                      "jaxptx._jax_private.CHECKED_JAX", stacklevel=1)


def test_private_jax_names_are_imported_only_through_jax_private():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "jaxptx").rglob("*.py")
                 if p.name != "_jax_private.py" and re.search(r"\bjax\._src\b", p.read_text())]
    assert not offenders, f"import private JAX names from jaxptx._jax_private: {offenders}"


def test_the_private_name_check_fails_when_a_name_changes(monkeypatch):
    from jaxptx import _jax_private

    monkeypatch.delattr(_jax_private.dispatch, "prim_requires_devices_during_lowering")
    monkeypatch.setattr(_jax_private.core, "ManualAxisType", lambda **kw: None)
    problems = _jax_private.problems()
    assert len(problems) == 2
    assert problems[0].startswith("jax._src.core.ManualAxisType is no longer a class")
    assert "prim_requires_devices_during_lowering is gone (used by jaxptx/jax/_primitive.py" \
        in problems[1]


@pytest.mark.parametrize("use", __import__("jaxptx._jax_private", fromlist=["USES"]).USES,
                         ids=lambda u: f"{u.module}.{u.attribute}")
def test_each_private_use_is_where_it_says(use):
    assert use.attribute in (ROOT / use.where).read_text()


@pytest.mark.parametrize("version", ["0.10.2", "0.11.2", "0.12.0"])
def test_the_jax_bounds_admit_the_supported_releases(version):
    from packaging.requirements import Requirement

    build = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    run = [Requirement(r) for r in PROJECT["dependencies"]]
    for requirement in [r for r in build + run if r.name in ("jax", "jaxlib")]:
        assert requirement.specifier.contains(version), f"{requirement} refuses jax {version}"
    assert {r.name for r in run} >= {"jax", "jaxlib"}


def test_every_checked_jax_is_admitted():
    from packaging.requirements import Requirement

    from jaxptx import _jax_private

    jax_req = next(Requirement(r) for r in PROJECT["dependencies"] if r.startswith("jax>"))
    for version in [*_jax_private.CHECKED_JAX, *_jax_private.SOURCE_CHECKED_JAX]:
        assert jax_req.specifier.contains(version, prereleases=True), version
