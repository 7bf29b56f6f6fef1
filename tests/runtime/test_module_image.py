"""jaxptx.runtime.module_image: the cubin or PTX the driver is given, from
the driver's CUDA version, the PTX's ISA version and the compiler's release
(the run-time check that replaces pinning the compiler to the driver)."""

from __future__ import annotations

import pytest

from jaxptx import kernel, ptx
from jaxptx.errors import ToolchainError
from jaxptx.runtime import _compat, module_image, plan_image
from jaxptx.runtime._compat import cuda_for_ptx, ptx_isa_version


@kernel(arch="sm_80", version="8.5")
def noop():
    ptx.ret()


PTX85 = noop.ptx()  # PTX ISA 8.5: CUDA 12.5


def test_ptx_isa_version_and_the_cuda_release_that_reads_it():
    assert ptx_isa_version(PTX85) == (8, 5)
    assert ptx_isa_version("// x\n.version 9.0\n.target sm_90a\n") == (9, 0)
    with pytest.raises(ValueError, match="no .version"):
        ptx_isa_version(".target sm_80\n")
    table = {(7, 0): (11, 0), (7, 8): (11, 8), (8, 0): (12, 0), (8, 5): (12, 5), (8, 6): (12, 7),
             (8, 7): (12, 8), (8, 8): (12, 9), (9, 0): (13, 0), (9, 1): (13, 1), (9, 4): (13, 4)}
    for isa_version, cuda in table.items():
        assert cuda_for_ptx(isa_version) == cuda
    with pytest.raises(ValueError, match="no CUDA release"):
        cuda_for_ptx((6, 4))


@pytest.mark.parametrize("driver, toolchain, kind, why", [
    ((13, 0), (13, 0), "cubin", "compiler CUDA 13.0 <= driver CUDA 13.0"),
    ((13, 2), (12, 8), "cubin", "<= driver"),
    ((13, 0), (13, 5), "ptx", "newer than the driver"),       # the old <13.1 pin's case
    ((12, 9), (13, 0), "ptx", "newer than the driver"),       # a new CUDA major
    ((13, 0), (12, 4), "ptx", "cannot read PTX ISA 8.5"),     # compiler older than the PTX
    ((12, 5), None, "ptx", "no CUDA compiler"),
    (None, (13, 0), "cubin", "no driver"),
])
def test_plan(driver, toolchain, kind, why):
    plan = plan_image(PTX85, "sm_80", driver=driver, toolchain=toolchain)
    assert plan.kind == kind and why in plan.why


def test_a_driver_older_than_the_ptx_is_an_error_naming_what_to_install():
    with pytest.raises(ToolchainError, match=r"driver supports CUDA 12.4, but this sm_80 kernel is "
                       r"PTX ISA 8.5 \(CUDA 12.5\).*driver for CUDA 12.5 or newer.*version="):
        plan_image(PTX85, "sm_80", driver=(12, 4), toolchain=(13, 0))
    with pytest.raises(ToolchainError, match="pip install -U nvidia-cuda-nvcc"):
        plan_image(PTX85, "sm_80", driver=None, toolchain=None)


def test_module_image_follows_the_plan(monkeypatch):
    monkeypatch.setattr(_compat, "driver_cuda_version", lambda: (13, 0))
    monkeypatch.setattr(_compat, "toolchain_cuda_version", lambda backend="auto": (13, 5))
    assert module_image(PTX85, "sm_80") == PTX85.encode()
    monkeypatch.setattr(_compat, "toolchain_cuda_version", lambda backend="auto": (13, 0))
    cubin = module_image(PTX85, "sm_80", backend="ptxas")
    assert cubin[:4] == b"\x7fELF"


def test_installed_versions_are_read():
    driver = _compat.driver_cuda_version()  # None on a machine with no driver
    assert driver is None or (len(driver) == 2 and driver >= (11, 0))
    toolchain = _compat.toolchain_cuda_version("ptxas")
    assert toolchain is not None and toolchain >= (13, 0)
    nvjitlink = _compat.toolchain_cuda_version("nvjitlink")
    assert nvjitlink is None or nvjitlink >= (13, 0)
