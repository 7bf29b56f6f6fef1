"""CUDA C++ to PTX with NVRTC, in process and without a GPU, cached in memory and on disk.

NVRTC comes from the pip wheel ``nvidia-cuda-nvrtc`` (or a CUDA toolkit that
``cuda.pathfinder`` finds) through ``cuda.bindings.nvrtc``; the headers a
kernel includes beyond NVRTC's built-in ones come from the wheels
``nvidia-cuda-cccl`` (CUB, Thrust, libcu++: ``<cub/...>``, ``<cuda/std/...>``)
and ``nvidia-cuda-runtime`` (``<cooperative_groups.h>``, ``<cuda_fp16.h>``),
all three in the ``jaxptx[nvrtc]`` extra. Their include directories are
searched after the caller's (:func:`default_include_dirs`).

A compile is keyed by its content: the source, the name expression, the
target, the options, the include directories, NVRTC's version and a stamp of
each caller's include directory (every file's path, size and modification
time, so an edited header compiles again). A hit in memory costs the stamp;
the disk cache (``_cache``, kind ``nvrtc``, beside the cubins) survives the
process.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxptx.errors import ToolchainError

from . import _cache

__all__ = ["CudaCompileError", "CudaDiagnostic", "CudaPtx", "compile_cuda",
           "default_include_dirs", "nvrtc_arch", "nvrtc_version", "parse_nvrtc_log"]

INSTALL_HINT = ("pip install 'jaxptx[nvrtc]' (the wheels nvidia-cuda-nvrtc, nvidia-cuda-cccl "
                "and nvidia-cuda-runtime)")
# Header directories of the wheels, by cuda.pathfinder's names: CCCL (CUB,
# Thrust, libcu++) and the CUDA runtime's (cooperative groups, cuda_fp16.h).
_HEADER_PACKAGES = ("cccl", "cudart")
# A diagnostic line of NVRTC's log (EDG's format):
#   cuda_call.cu(9): error: identifier "x" is undefined
#   /path/block_reduce.cuh(294): note #3326-D: function ... does not match
_DIAG_RE = re.compile(r"^(?P<file>\S[^\n]*?)\((?P<line>\d+)\): "
                      r"(?P<sev>catastrophic error|error|warning|note|remark)"
                      r"(?: #[\w-]+)?: (?P<msg>.*)$")
_CARET_RE = re.compile(r"^ *\^ *$")
_SHOWN_ERRORS = 5
# NVRTC echoes the offending source line indented by two spaces, then a caret.
_ECHO_INDENT = 2
_TARGET_RE = re.compile(r"^sm_(\d+)([af]?)$")
# NVRTC's words for a header not found ("could not" when no -I was given).
_MISSING_HEADER = re.compile(r"(?:cannot|could not) open source file")


class CudaCompileError(ToolchainError):
    """NVRTC rejected a CUDA C++ program (or its options).

    Attributes:
        log: NVRTC's whole log.
        diagnostics: its errors, warnings and notes (:class:`CudaDiagnostic`).
    """

    def __init__(self, message: str, log: str = "",
                 diagnostics: Sequence[CudaDiagnostic] = ()) -> None:
        super().__init__(message)
        self.log = log
        self.diagnostics = tuple(diagnostics)


@dataclasses.dataclass(frozen=True)
class CudaDiagnostic:
    """One diagnostic of NVRTC's log.

    Attributes:
        file: the file it names (the program's name, or a header's path).
        line: its 1-based line.
        severity: ``"error"``, ``"catastrophic error"``, ``"warning"``,
            ``"note"`` or ``"remark"``.
        message: the text after the severity (continuation lines joined).
        column: the 1-based column of NVRTC's caret, 0 when it drew none.
    """

    file: str
    line: int
    severity: str
    message: str
    column: int = 0


@dataclasses.dataclass(frozen=True)
class CudaPtx:
    """What one NVRTC compile gave.

    Attributes:
        ptx: the PTX text, as NVRTC wrote it.
        entry: the lowered (mangled) name of the compile's name expression,
            or None when it had none.
        log: NVRTC's log (warnings; empty for a clean compile).
    """

    ptx: str
    entry: str | None
    log: str


def _nvrtc() -> types.ModuleType:
    """``cuda.bindings.nvrtc``."""
    try:  # optional dependency: cuda-python (cuda.bindings.nvrtc) loads libnvrtc lazily
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise ToolchainError(f"cuda.bindings is missing ({e}); pip install cuda-bindings") from e
    return nvrtc


@functools.cache
def nvrtc_version() -> tuple[int, int] | None:
    """NVRTC's ``(major, minor)``, or None where cuda.bindings or libnvrtc is missing."""
    try:
        err, major, minor = _nvrtc().nvrtcVersion()
    except Exception:  # noqa: BLE001 - ImportError, or the library fails to load
        return None
    return (int(major), int(minor)) if int(err) == 0 else None


@functools.cache
def _compiler() -> str:
    """NVRTC's version, as the disk cache's key names it (the wheel's release
    too, where pip installed it: patch releases share a major.minor)."""
    version = nvrtc_version()
    if version is None:
        raise ToolchainError(f"NVRTC (libnvrtc) not found; {INSTALL_HINT}")
    name = f"nvrtc {version[0]}.{version[1]}"
    try:
        return f"{name} ({importlib.metadata.version('nvidia-cuda-nvrtc')})"
    except importlib.metadata.PackageNotFoundError:       # a toolkit's NVRTC, not the wheel's
        return name


@functools.cache
def default_include_dirs() -> tuple[str, ...]:
    """The header directories searched after the caller's: CCCL's and the CUDA
    runtime's, from the pip wheels (``cuda.pathfinder``), those present."""
    try:  # optional dependency: cuda-pathfinder (ships with cuda-python)
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError:
        return ()
    found = []
    for package in _HEADER_PACKAGES:
        try:
            path = find_nvidia_header_directory(package)
        except Exception:  # noqa: BLE001 - a name this pathfinder does not know
            path = None
        if path and path not in found:
            found.append(str(path))
    return tuple(found)


def _stamp(dirs: Sequence[str]) -> str:
    """A digest of every file's path, size and modification time under ``dirs``."""
    h = hashlib.sha256()
    for d in dirs:
        for root, subdirs, files in os.walk(d):
            subdirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


@functools.cache
def _default_stamp() -> str:
    """The stamp of :func:`default_include_dirs` (the wheels change only
    between processes)."""
    return _stamp(default_include_dirs())


def nvrtc_arch(arch: str) -> str:
    """NVRTC's virtual target for an ``sm_XX`` name: ``sm_90a`` -> ``compute_90a``.

    Raises:
        ToolchainError: ``arch`` is not of the form ``sm_<number>[a|f]``.
    """
    m = _TARGET_RE.match(arch)
    if m is None:
        raise ToolchainError(f"arch: expected a target like 'sm_80' or 'sm_90a', got {arch!r}")
    return f"compute_{m.group(1)}{m.group(2)}"


def compile_cuda(source: str, arch: str, *, name_expression: str | None = None,
                 options: Sequence[str] = (), include_dirs: Sequence[str | os.PathLike] = (),
                 filename: str = "cuda_call.cu", cache: bool = True) -> CudaPtx:
    """Compile CUDA C++ to PTX for ``arch`` with NVRTC (no GPU needed).

    Args:
        source: the program's text.
        arch: the target, e.g. ``"sm_90a"`` (NVRTC gets ``compute_90a``, so
            it writes PTX only and no cubin).
        name_expression: a C++ name of a ``__global__`` function
            (``"scale<float>"``, ``"ns::kernel"``, or an ``extern "C"``
            name): NVRTC instantiates it and reports its mangled name.
        options: more NVRTC flags (``"-DN=4"``, ``"--use_fast_math"``).
        include_dirs: header directories, searched in order before
            :func:`default_include_dirs`.
        filename: the program's name in NVRTC's messages.
        cache: look in (and fill) the caches in memory and on disk.

    Returns:
        The PTX, the name expression's lowered name and NVRTC's log.

    Raises:
        CudaCompileError: NVRTC rejected the program or the options; the
            message shows each error with its source line.
        ToolchainError: NVRTC is missing, or ``arch`` is not an ``sm_XX`` name.
    """
    dirs = tuple(os.fspath(d) for d in include_dirs)
    flags = (f"--gpu-architecture={nvrtc_arch(arch)}", *options,
             *(f"--include-path={d}" for d in (*dirs, *default_include_dirs())))
    if not cache:
        return _compile(source, name_expression, flags, filename)
    return _memoized(source, name_expression, flags, filename, _stamp(dirs))


@functools.lru_cache(maxsize=128)
def _memoized(source: str, name_expression: str | None, flags: tuple[str, ...], filename: str,
              stamp: str) -> CudaPtx:
    """The compile through the disk cache (``stamp`` only keys it)."""
    key = json.dumps([source, name_expression, flags, filename, stamp, _default_stamp()])
    found: list[CudaPtx] = []

    def compile() -> bytes:
        found.append(_compile(source, name_expression, flags, filename))
        return json.dumps(dataclasses.asdict(found[0])).encode()

    payload = _cache.cached(key, flags[0], _compiler(), compile, kind="nvrtc")
    return found[0] if found else CudaPtx(**json.loads(payload))


def _compile(source: str, name_expression: str | None, flags: Sequence[str],
             filename: str) -> CudaPtx:
    """One NVRTC compile (no cache)."""
    _compiler()                          # NVRTC loads, or the error says what to install
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        if name_expression is not None:
            _check(nvrtc, nvrtc.nvrtcAddNameExpression(prog, name_expression.encode())[0],
                   "nvrtcAddNameExpression")
        encoded = [f.encode() for f in flags]
        result, = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _log(nvrtc, prog)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise _compile_error(result, log, source, filename, flags)
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check(nvrtc, err, "nvrtcGetPTXSize")
        buf = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetPTX(prog, buf)[0], "nvrtcGetPTX")
        entry = None
        if name_expression is not None:
            err, lowered = nvrtc.nvrtcGetLoweredName(prog, name_expression.encode())
            _check(nvrtc, err, "nvrtcGetLoweredName")
            entry = lowered.decode()
        return CudaPtx(buf.rstrip(b"\0").decode(), entry, log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _check(nvrtc: types.ModuleType, err: Any, call: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise ToolchainError(f"NVRTC: {call} failed: {text.decode()}")


def _log(nvrtc: types.ModuleType, prog: Any) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0").decode(errors="replace").strip()


def parse_nvrtc_log(log: str) -> list[CudaDiagnostic]:
    """The diagnostics of an NVRTC log, in order, each with its caret's column."""
    out: list[CudaDiagnostic] = []
    lines = log.splitlines()
    for i, text in enumerate(lines):
        m = _DIAG_RE.match(text)
        if m is None:
            continue
        message, column = [m["msg"].strip()], 0
        for follow in lines[i + 1:]:
            if not follow.strip() or _DIAG_RE.match(follow):
                break
            if _CARET_RE.match(follow):
                column = follow.index("^") - _ECHO_INDENT + 1
                break
            message.append(follow.strip())
        # The line before the caret is NVRTC's echo of the source, not the message.
        if column and len(message) > 1:
            message.pop()
        out.append(CudaDiagnostic(m["file"], int(m["line"]), m["sev"], " ".join(message), column))
    return out


def _source_line(diag: CudaDiagnostic, source: str, filename: str) -> str | None:
    """The line a diagnostic names: from the program, or from a header on disk."""
    if diag.file == filename:
        lines = source.splitlines()
    else:
        try:
            lines = Path(diag.file).read_text(errors="replace").splitlines()
        except OSError:
            return None
    return lines[diag.line - 1] if 0 < diag.line <= len(lines) else None


def _compile_error(result: Any, log: str, source: str, filename: str,
                   flags: Sequence[str]) -> CudaCompileError:
    """The error for a failed compile: each error (the first few) with its
    source line, numbered, and a caret under NVRTC's column."""
    nvrtc = _nvrtc()
    diags = parse_nvrtc_log(log)
    if result == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:
        said = next((s for s in log.splitlines() if s.strip()), "invalid option")
        return CudaCompileError(f"NVRTC refused the options {list(flags)}: {said}"
                                f"{_arch_hint(said)}", log, diags)
    errors = [d for d in diags if d.severity.endswith("error")]
    out = [f"NVRTC could not compile {filename} ({flags[0]}): {len(errors)} error(s)"]
    for d in errors[:_SHOWN_ERRORS]:
        out.append(f"{d.file}({d.line}): {d.severity}: {d.message}")
        line = _source_line(d, source, filename)
        if line is not None:
            out.append(f"    {d.line:>4} | {line}")
            if d.column:
                out.append(f"         | {' ' * (d.column - 1)}^")
    if len(errors) > _SHOWN_ERRORS:
        out.append(f"... and {len(errors) - _SHOWN_ERRORS} more (the whole log is .log)")
    if not errors:
        out.append(log or f"NVRTC result {result!r} and no log")
    if _MISSING_HEADER.search(log):
        searched = [f.split("=", 1)[1] for f in flags if f.startswith("--include-path=")]
        out.append(f"(include_dirs searched: {searched or 'none'}; CUB, Thrust and libcu++ come "
                   f"from nvidia-cuda-cccl, cooperative groups from nvidia-cuda-runtime: "
                   f"{INSTALL_HINT})")
    return CudaCompileError("\n".join(out), log, diags)


def _arch_hint(said: str) -> str:
    if "gpu-architecture" not in said:
        return ""
    try:
        _, archs = _nvrtc().nvrtcGetSupportedArchs()
    except Exception:  # noqa: BLE001 - only a hint
        return ""
    return "; this NVRTC targets " + ", ".join(f"sm_{a}" for a in archs)
