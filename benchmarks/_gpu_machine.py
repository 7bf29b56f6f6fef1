"""The machine ``benchmarks/gpu_check.py`` runs on, and running commands there.

Where its tools are (:func:`find_tool`), the environment the steps' commands
get (:class:`Context`: ``CUDA_HOME``, no network for pip, ``JAXPTX_ARCH``
removed), one command run with a deadline in its own process group, its
output appended to a log (:meth:`Context.run`), the facts reported about the
machine (:func:`machine_info`) and the check, in a child process, of what
imports and what jaxptx detects (:func:`preflight`).
"""

from __future__ import annotations

import glob
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _gpu_parse import last_line, parse_json_output

REPO = Path(__file__).resolve().parents[1]
NO_PREALLOCATE = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
"""For a child that runs JAX on the GPU: memory as needed, not most of it at start (the tools need some)."""


# -- running commands ------------------------------------------------------------------------

@dataclass
class Cmd:
    """One subprocess of a step: ``argv``, environment additions, a label."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    label: str = ""

    def text(self) -> str:
        """The command line as a shell would take it, environment additions first."""
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


@dataclass
class Ran:
    """What one command did: exit code (None: timed out), seconds, its output."""

    cmd: Cmd
    rc: int | None
    seconds: float
    output: str
    timed_out: bool = False


class Context:
    """What every step needs: paths, the interpreter, tools, the child environment, the log."""

    def __init__(self, out: Path, python: str, repeat: int, dry_run: bool, smoke: bool = False) -> None:
        self.out = out
        self.python = python
        self.repeat = repeat
        self.dry_run = dry_run
        self.smoke = smoke            # benchmarks run in their --smoke mode
        self.logs = out / "logs"
        self.tools = {name: find_tool(name) for name in ("nvidia-smi", "compute-sanitizer", "ncu", "nvcc",
                                                         "ptxas", "cmake", "ninja")}
        self.env_added: dict[str, str] = {}
        self.env_removed: list[str] = []
        self.env = self._child_env()
        self.preflight: dict[str, Any] = {}

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        cuda = _cuda_home()
        if cuda and not env.get("CUDA_HOME") and (Path(cuda) / "include" / "cuda.h").exists():
            self.env_added["CUDA_HOME"] = cuda           # the build's cuda.h declaration checks
        if cuda and (Path(cuda) / "bin").is_dir() and str(Path(cuda) / "bin") not in env.get("PATH", ""):
            self.env_added["PATH"] = f"{env.get('PATH', '')}{os.pathsep}{Path(cuda) / 'bin'}"
        self.env_added.update({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1",
                               "PYTHONUNBUFFERED": "1"})
        env.update(self.env_added)
        if "JAXPTX_ARCH" in env:    # it turns GPU detection off (tests/conftest.py); this run is for the GPU
            del env["JAXPTX_ARCH"]
            self.env_removed.append("JAXPTX_ARCH")
        return env

    def env_summary(self) -> dict[str, str]:
        """The environment changes for the children, ``PATH`` shown as what was appended."""
        out = dict(self.env_added)
        if "PATH" in out:
            out["PATH"] = "(appended) " + out["PATH"].rsplit(os.pathsep, 1)[-1]
        return out

    def run(self, cmd: Cmd, timeout: float, log_name: str) -> Ran:
        """Run ``cmd`` from the repository root with at most ``timeout`` seconds,
        stdout and stderr together, appended to ``logs/<log_name>.log``."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{log_name}.log"
        env = dict(self.env)
        env.update(cmd.env)
        t0 = time.monotonic()
        with open(log, "ab") as f:
            f.write(f"\n$ {cmd.text()}\n".encode())
            f.flush()
            start = f.tell()
            if timeout <= 0:
                f.write(b"(not started: no time left in this step's budget)\n")
                return Ran(cmd, None, 0.0, "(not started: no time left in this step's budget)", True)
            try:
                proc = subprocess.Popen(cmd.argv, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                f.write(f"could not start: {e}\n".encode())
                return Ran(cmd, 127, time.monotonic() - t0, f"could not start {cmd.argv[0]}: {e}")
            timed_out = False
            try:
                rc: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out, rc = True, None
                _stop(proc)
            seconds = time.monotonic() - t0
            if timed_out:
                f.write(f"\n(timed out after {timeout:.0f} s; stopped)\n".encode())
        with open(log, "rb") as f:
            f.seek(start)
            output = f.read().decode(errors="replace")
        return Ran(cmd, rc, seconds, output, timed_out)


def _stop(proc: subprocess.Popen) -> None:
    """Stop the process group this script started for ``proc``: TERM, up to 5 s
    for ``proc`` to exit, then KILL whatever of the group is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _cuda_home() -> str | None:
    for c in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if c and Path(c).is_dir():
            return c
    return None


def gpu_listed(nvidia_smi: str | None) -> bool:
    """Whether ``nvidia-smi -L`` (at the path given; None: not found) lists a GPU."""
    if not nvidia_smi:
        return False
    try:
        out = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def find_tool(name: str) -> str | None:
    """The path of an executable: ``PATH``, then ``$CUDA_HOME/bin``,
    ``/usr/local/cuda/bin``, and Nsight Compute's own install folders; None if absent."""
    found = shutil.which(name)
    if found:
        return found
    cands = [Path(c) / "bin" / name for c in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if c]
    if name == "ncu":
        cands += [Path(p) for p in sorted(glob.glob("/usr/local/cuda*/nsight-compute*/ncu"))
                  + sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))]
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None



# -- machine facts ---------------------------------------------------------------------------

def _output(argv: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a short command to read what it prints (stdout and stderr apart, as text)."""
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout, **kwargs)


def _version(dist: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_info(ctx: Context) -> dict[str, Any]:
    """GPU name and driver (nvidia-smi), Python, package versions, the repository commit."""
    info: dict[str, Any] = {"python": sys.version.split()[0], "executable": ctx.python,
                            "platform": platform.platform(), "cpus": os.cpu_count()}
    smi = ctx.tools["nvidia-smi"]
    if smi:
        try:
            out = _output([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], 20)
            gpus = [dict(zip(("name", "driver", "memory"), (s.strip() for s in ln.split(","))))
                    for ln in out.stdout.strip().splitlines() if ln.strip()]
            info["gpus"] = gpus if out.returncode == 0 else \
                f"nvidia-smi exited {out.returncode}: {out.stderr.strip()[:200]}"
        except (OSError, subprocess.TimeoutExpired) as e:
            info["gpus"] = f"nvidia-smi failed: {e}"
    else:
        info["gpus"] = "nvidia-smi not found"
    if ctx.tools["nvcc"]:
        try:
            info["nvcc"] = last_line(_output([ctx.tools["nvcc"], "--version"], 20).stdout)
        except (OSError, subprocess.TimeoutExpired) as e:
            info["nvcc"] = f"failed: {e}"
    info["versions"] = {d: _version(d) for d in ("jaxptx", "jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt",
                                                 "torch", "triton", "numpy", "nanobind", "scikit-build-core",
                                                 "cuda-bindings", "nvidia-cuda-nvcc")}
    try:
        info["commit"] = _output(["git", "-C", str(REPO), "rev-parse", "HEAD"], 10).stdout.strip() or None
        dirty = _output(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], 20)
        info["uncommitted_changes"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        info["commit"] = None
    return info


_PREFLIGHT = """
import importlib, importlib.util, json, sys
out = {"imports": {}}
for m in sys.argv[1:]:
    optional = m.startswith("?")
    m = m.lstrip("?")
    try:
        if optional:
            out["imports"][m] = "found" if importlib.util.find_spec(m) is not None else "not found"
        else:
            importlib.import_module(m)
            out["imports"][m] = "ok"
    except Exception as e:
        out["imports"][m] = f"{type(e).__name__}: {e}"[:300]
try:
    from jaxptx.runtime import detect_arch, find_tool
    out["detect_arch"] = detect_arch()
    try:
        out["ptxas"] = find_tool("ptxas")
    except Exception as e:
        out["ptxas"] = f"not found: {e}"[:300]
except Exception as e:
    out["detect_arch"] = f"{type(e).__name__}: {e}"[:300]
try:
    import jax
    out["jax_devices"] = [f"{d.platform}: {getattr(d, 'device_kind', '')}" for d in jax.devices()]
except Exception as e:
    out["jax_devices"] = f"{type(e).__name__}: {e}"[:300]
print(json.dumps(out))
"""
PREFLIGHT_MODULES = ["numpy", "jax", "jaxptx", "?jaxptx._ffi", "?cuda.bindings", "?cuda.pathfinder", "?ml_dtypes",
                     "?torch", "?jaxptx.capture", "?jaxptx.replay"]
"""What :func:`preflight` imports (a ``?``: only whether it is found)."""


def preflight(ctx: Context) -> dict[str, Any]:
    """In a child process: import numpy, jax and jaxptx (the optional modules:
    whether they are found), the target jaxptx detects (``detect_arch``: None
    means jaxptx sees no GPU, and the ``gpu`` tests skip), the ptxas it uses,
    and JAX's devices."""
    try:
        out = _output([ctx.python, "-c", _PREFLIGHT, *PREFLIGHT_MODULES], 60, cwd=REPO,
                      env={**ctx.env, **NO_PREALLOCATE})
    except subprocess.TimeoutExpired:
        return {"imports": {}, "error": "preflight timed out after 60 s"}
    doc = parse_json_output(out.stdout)
    if isinstance(doc, dict):
        return doc
    return {"imports": {}, "error": f"preflight failed: {last_line(out.stderr or out.stdout)}"}
