"""The CUDA toolchain as jaxptx uses it: ptxas, nvJitLink, nvdisasm.

All of it works without a GPU: ptxas/nvdisasm come from the pip wheels
``nvidia-cuda-nvcc`` / ``nvidia-cuda-nvdisasm`` (or a toolkit on ``PATH``);
nvJitLink (optional ``cuda-python`` + ``nvidia-nvjitlink``) compiles in-process.
Only :func:`detect_arch` needs a driver, and returns ``None`` without one.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from jaxptx.errors import PtxasError, ToolchainError

from . import _cache

__all__ = [
    "PtxasDiagnostic", "PtxasResult", "Resources", "arch_from_capability",
    "compile_cubin", "detect_arch", "find_tool", "parse_ptxas_errors", "ptxas",
    "resources", "resources_all", "sass", "tool_version",
]

_PIP_PACKAGE = {"ptxas": "nvidia-cuda-nvcc", "nvlink": "nvidia-cuda-nvcc",
                "nvdisasm": "nvidia-cuda-nvdisasm", "cuobjdump": "nvidia-cuda-cuobjdump"}
_DIAG_RE = re.compile(r"^ptxas\b(?:[^;\n]*?, line (?P<line>\d+);)?\s*"
                      r"(?P<sev>error|warning|fatal)\s*:\s*(?P<msg>.*)$", re.MULTILINE)
_MAX_SHOWN_ERRORS = 3


@dataclasses.dataclass(frozen=True)
class PtxasResult:
    """A successful ptxas run: ``cubin`` (ELF bytes) and ``log`` (all it printed)."""

    cubin: bytes
    log: str


@dataclasses.dataclass(frozen=True)
class PtxasDiagnostic:
    """One ptxas diagnostic: PTX ``line`` (0 if none), ``severity``
    (``"error"``, ``"warning"``, ``"fatal"``) and ``message``."""

    line: int
    severity: str
    message: str


@dataclasses.dataclass(frozen=True)
class Resources:
    """Per-function resource use reported by ``ptxas -v`` (absent fields are 0).

    Registers are per thread; ``shared_bytes`` is static smem per CTA;
    ``stack_frame``/``spill_*`` are bytes per thread; ``const_bytes`` is
    ``cmem[0]`` (driver area + params), read from the cubin's
    ``.nv.constant0.<name>`` section when ptxas omits it (ptxas 13 on sm_90+).
    """

    registers: int = 0
    shared_bytes: int = 0
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0
    const_bytes: int = 0


def _pip_bin_dirs() -> list[Path]:
    """The ``bin`` dirs of the pip ``nvidia`` namespace package, newest first."""
    try:
        import nvidia  # namespace package of the nvidia-* wheels
    except ImportError:
        return []
    dirs: list[Path] = []
    for root in map(Path, getattr(nvidia, "__path__", [])):
        dirs += sorted(root.glob("cu[0-9]*/bin"), reverse=True) + sorted(root.glob("cuda_*/bin"))
    return dirs


def _locate(name: str, *, pathfinder: bool = True,
            pip_dirs: Sequence[Path] | None = None, path: str | None = None) -> str:
    """Uncached worker of :func:`find_tool`; the keywords narrow the search."""
    if pathfinder:
        try:  # optional dependency: cuda-pathfinder (ships with cuda-python)
            from cuda.pathfinder import find_nvidia_binary_utility
            found = find_nvidia_binary_utility(name)
        except Exception:  # not installed, or a utility it does not know
            found = None
        if found:
            return str(found)
    for d in _pip_bin_dirs() if pip_dirs is None else pip_dirs:
        candidate = Path(d) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name, path=path)
    if found:
        return found
    package = _PIP_PACKAGE.get(name, "the matching nvidia-cuda-* wheel")
    raise ToolchainError(f"{name} not found; pip install {package} "
                         "(or put a CUDA toolkit's bin/ on PATH)")


@functools.cache
def find_tool(name: str) -> str:
    """Path of a CUDA utility (``ptxas``, ``nvdisasm``, ``cuobjdump``), cached.

    Looks in ``cuda.pathfinder``, then the pip ``nvidia/cu*/bin`` dirs, then ``PATH``.

    Raises:
        ToolchainError: Not found; the message names the pip package to install.
    """
    return _locate(name)


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise ToolchainError(f"cannot run {cmd[0]}: {e}") from e


def tool_version(name: str) -> str:
    """The release of a CUDA tool, e.g. ``"13.0.88"``, from ``name --version``.

    Raises:
        ToolchainError: The tool is missing or prints no version.
    """
    return _version_at(find_tool(name), name)


@functools.cache
def _version_at(exe: str, name: str) -> str:
    out = _run([exe, "--version"]).stdout
    m = re.search(r"\bV(\d+(?:\.\d+)+)", out) or re.search(r"release (\d+\.\d+)", out)
    if not m:
        raise ToolchainError(f"cannot parse the version of {name} from: {out!r}")
    return m.group(1)


def parse_ptxas_errors(log: str) -> list[PtxasDiagnostic]:
    """The error, warning and fatal lines of ptxas (or nvJitLink) output, in order.

    Understands ``ptxas /tmp/x.ptx, line 12; error   : Unknown symbol 'foo'``
    and ``ptxas fatal   : ...``; info lines are skipped.
    """
    return [PtxasDiagnostic(int(m["line"] or 0), m["sev"], m["msg"].strip())
            for m in _DIAG_RE.finditer(log)]


def _error_message(log: str, ptx: str) -> str:
    """The first errors by line as ``ptxas: line L: msg`` plus the source line."""
    diags = [d for d in parse_ptxas_errors(log) if d.severity != "warning"]
    located = sorted(dict.fromkeys(d for d in diags if d.line), key=lambda d: d.line)
    if not located:
        first = next((d.message for d in diags), None)
        return "ptxas: " + (first or next((s for s in log.splitlines() if s.strip()), "failed"))
    src, out = ptx.splitlines(), []
    shown = located[:_MAX_SHOWN_ERRORS]
    for d, after in zip(shown, shown[1:] + [None]):
        out.append(f"ptxas: line {d.line}: {d.message}")
        if d.line <= len(src) and (after is None or after.line != d.line):
            out.append(f"    {d.line:>4} | {src[d.line - 1].strip()}")
    if len(located) > _MAX_SHOWN_ERRORS:
        out.append(f"... and {len(located) - _MAX_SHOWN_ERRORS} more (see .log)")
    return "\n".join(out)


def ptxas(ptx: str, arch: str, *, verbose: bool = False,
          extra_args: Sequence[str] = ()) -> PtxasResult:
    """Assemble PTX to a cubin with the ``ptxas`` executable.

    Args:
        ptx: The PTX module text.
        arch: The target, e.g. ``"sm_90a"``.
        verbose: Pass ``-v`` (resource usage lands in ``log``).
        extra_args: More ptxas flags, e.g. ``("-O0", "-lineinfo")``.

    Raises:
        PtxasError: ptxas rejected the module; ``.log`` holds its full output.
        ToolchainError: ptxas is missing or could not run.
    """
    exe = find_tool("ptxas")
    with tempfile.TemporaryDirectory(prefix="jaxptx-") as tmp:
        src, out = Path(tmp, "kernel.ptx"), Path(tmp, "kernel.cubin")
        src.write_text(ptx)
        proc = _run([exe, f"-arch={arch}", *(["-v"] if verbose else []), *extra_args,
                     str(src), "-o", str(out)])
        log = proc.stdout + proc.stderr
        if proc.returncode != 0 or not out.is_file():
            raise PtxasError(_error_message(log, ptx), log)
        return PtxasResult(out.read_bytes(), log)


def _nvjitlink_compile(ptx: str, arch: str) -> bytes:
    from cuda.bindings import nvjitlink  # optional dependency: cuda-python

    try:
        handle = nvjitlink.create(1, [f"-arch={arch}"])
    except nvjitlink.nvJitLinkError as e:
        raise PtxasError(f"nvJitLink: cannot target {arch!r}: {e}", str(e)) from e
    try:
        data = ptx.encode()
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
        nvjitlink.complete(handle)
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    except nvjitlink.nvJitLinkError as e:
        buf = bytearray(nvjitlink.get_error_log_size(handle))
        if buf:
            nvjitlink.get_error_log(handle, buf)
        log = buf.rstrip(b"\0").decode(errors="replace") or str(e)
        raise PtxasError(_error_message(log, ptx), log) from e
    finally:
        nvjitlink.destroy(handle)


@functools.cache
def _nvjitlink_version() -> str | None:
    """``"13.0"``, or None where cuda-python or libnvJitLink is missing."""
    try:
        from cuda.bindings import nvjitlink  # optional dependency: cuda-python
        return "%d.%d" % nvjitlink.version()
    except Exception:  # noqa: BLE001 - an import error, or the library fails to load
        return None


def compile_cubin(ptx: str, arch: str, *,
                  backend: Literal["auto", "nvjitlink", "ptxas"] = "auto",
                  cache: bool = True) -> bytes:
    """Compile PTX to an ELF cubin for ``arch``.

    Args:
        ptx: The PTX module text.
        arch: The target, e.g. ``"sm_90a"``.
        backend: ``"nvjitlink"`` (in-process, ``cuda.bindings.nvjitlink``),
            ``"ptxas"`` (subprocess), or ``"auto"``: nvJitLink if importable.
        cache: look in (and fill) the on-disk cubin cache, keyed by the PTX,
            the target and the compiler's version (see ``_cache``).

    Raises:
        PtxasError: The module was rejected (``.log`` holds the full output).
        ToolchainError: The chosen backend is unavailable.
        ValueError: Unknown backend.
    """
    if backend == "auto":
        backend = "nvjitlink" if _nvjitlink_version() else "ptxas"
    if backend == "nvjitlink":
        version = _nvjitlink_version()
        if version is None:
            raise ToolchainError("nvJitLink unavailable; pip install cuda-python nvidia-nvjitlink")
        compiler = f"nvjitlink {version}"
        compile = functools.partial(_nvjitlink_compile, ptx, arch)
    elif backend == "ptxas":
        compiler = f"ptxas {tool_version('ptxas')}"
        compile = lambda: ptxas(ptx, arch).cubin  # noqa: E731
    else:
        raise ValueError(f"unknown backend {backend!r}; expected 'auto', 'nvjitlink' or 'ptxas'")
    return _cache.cached(ptx, arch, compiler, compile) if cache else compile()


def sass(cubin: bytes) -> str:
    """Disassemble a cubin's code sections to SASS text (``nvdisasm -c``).

    Raises:
        ToolchainError: nvdisasm is missing or rejected the image.
    """
    exe = find_tool("nvdisasm")
    with tempfile.TemporaryDirectory(prefix="jaxptx-") as tmp:
        path = Path(tmp, "kernel.cubin")
        path.write_bytes(cubin)
        proc = _run([exe, "-c", str(path)])
    if proc.returncode != 0:
        raise ToolchainError(f"nvdisasm failed: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


_RESOURCE_RE = {
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
    "const_bytes": re.compile(r"(\d+) bytes cmem\[0\]"),
    "stack_frame": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
}
_FUNC_RE = re.compile(r"Compiling entry function '([^']+)'|Function properties for '?([^'\s:]+)")


def _elf_section_sizes(elf: bytes) -> dict[str, int]:
    """``{section name: size}`` of a little-endian ELF64 image such as a cubin."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<I4xQ8xQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][2]
    return {elf[names + n:elf.index(b"\0", names + n)].decode(): size
            for n, _, _, size in headers}


def resources_all(ptx: str, arch: str) -> dict[str, Resources]:
    """``{function name: Resources}`` of a module, from ``ptxas -v`` (its order).

    Raises:
        PtxasError: ptxas rejected the module.
    """
    result = ptxas(ptx, arch, verbose=True)
    fields: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in result.log.splitlines():
        if m := _FUNC_RE.search(line):
            current = m.group(1) or m.group(2)
            fields.setdefault(current, {})
        elif current is not None:
            for key, rx in _RESOURCE_RE.items():
                if v := rx.search(line):
                    fields[current][key] = int(v.group(1))
    sections = _elf_section_sizes(result.cubin)
    for name, f in fields.items():
        f.setdefault("const_bytes", sections.get(f".nv.constant0.{name}", 0))
    return {name: Resources(**f) for name, f in fields.items()}


def resources(ptx: str, arch: str) -> Resources:
    """Resource use of the module's first ``.entry`` (in source order).

    Raises:
        PtxasError: ptxas rejected the module.
        ToolchainError: ptxas reported no function.
    """
    table = resources_all(ptx, arch)
    m = re.search(r"\.entry\s+([A-Za-z_$%][\w$]*)", ptx)
    if m and m.group(1) in table:
        return table[m.group(1)]
    if not table:
        raise ToolchainError("ptxas -v reported no function for this module")
    return next(iter(table.values()))


def arch_from_capability(major: int, minor: int) -> str:
    """The ``sm_XX`` target jaxptx uses for a compute capability.

    9.0, 10.x and 12.x get their arch-specific ``a`` variant (``sm_90a``,
    ``sm_100a``, ``sm_103a``, ``sm_120a``: jaxptx kernels use their tensor-core
    features); others map to plain ``sm_{major}{minor}``.
    """
    suffix = "a" if (major, minor) == (9, 0) or major in (10, 12) else ""
    return f"sm_{major}{minor}{suffix}"


@functools.cache
def _device_capability() -> tuple[int, int] | None:
    try:  # optional dependency: cuda-python (cuda.bindings.driver)
        from cuda.bindings import driver
        ok, attr = driver.CUresult.CUDA_SUCCESS, driver.CUdevice_attribute
        if driver.cuInit(0)[0] != ok:
            return None
        err, dev = driver.cuDeviceGet(0)
        if err != ok:
            return None
        cap = [driver.cuDeviceGetAttribute(a, dev) for a in (
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)]
        if any(e != ok for e, _ in cap):
            return None
        return int(cap[0][1]), int(cap[1][1])
    except (ImportError, RuntimeError, OSError):  # no cuda-python, or no driver
        return None


def detect_arch() -> str | None:
    """The ``sm_XX`` target of CUDA device 0, or ``None`` with no GPU/driver.

    The environment variable ``JAXPTX_ARCH`` (``sm_90a``, or just ``90a``)
    takes precedence over the device, e.g. to pick a target on a CPU-only
    machine.

    Raises:
        ToolchainError: ``JAXPTX_ARCH`` is set but is not an ``sm_XX`` name.
    """
    env = os.environ.get("JAXPTX_ARCH", "").strip()
    if env:
        arch = env if env.startswith("sm_") else f"sm_{env}"
        if not re.fullmatch(r"sm_\d+[af]?", arch):
            raise ToolchainError(f"JAXPTX_ARCH={env!r} is not a target like 'sm_90a'")
        return arch
    cap = _device_capability()
    return None if cap is None else arch_from_capability(*cap)
