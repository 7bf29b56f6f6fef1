"""The emulator's process-wide malloc tuning (:mod:`jaxptx.sim.core.host`):
on by default (going without costs two to three times the time), done once
per process on the first launch, said once on the ``jaxptx.sim`` logger,
and left out with ``JAXPTX_SIM_MALLOPT=0``."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim.core import host

from elementwise import SCALE_PTX as SCALE

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")

MESSAGE = (r"^jaxptx\.sim: raised glibc malloc's mmap threshold to 32 MiB and its trim threshold to 128 MiB for "
           r"this process \(the emulator's per-instruction arrays would otherwise fault in fresh pages\); "
           r"JAXPTX_SIM_MALLOPT=0 turns this off$")


class _Libc:
    """A stand-in for glibc that records its ``mallopt`` calls."""

    def __init__(self, calls: list[tuple[int, int]]) -> None:
        self.calls = calls

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


@pytest.fixture
def mallopt_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """A process that has not tuned the allocator yet, with a recording libc."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(host, "_done", False)
    monkeypatch.setattr(host.ctypes, "CDLL", lambda name: _Libc(calls))
    return calls


def _launch_twice() -> None:
    for _ in range(2):
        with sim.Device() as dev:
            x = dev.to_device(np.arange(4, dtype=np.float32))
            dev.launch(SCALE, [x, 2.0], block=4)
            np.testing.assert_array_equal(dev.from_device(x, like=np.zeros(4, np.float32)), [0, 2, 4, 6])
            dev.free(x)


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "jaxptx.sim" and "malloc" in r.getMessage()]


def test_the_first_launch_tunes_the_allocator_once_and_says_so_once(
        mallopt_calls, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAXPTX_SIM_MALLOPT", raising=False)
    with caplog.at_level(logging.INFO, logger="jaxptx.sim"):
        _launch_twice()
    assert mallopt_calls == [(-3, 32 << 20), (-1, 128 << 20)]      # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    records = _records(caplog)
    assert len(records) == 1 and records[0].levelno == logging.INFO
    assert re.match(MESSAGE, records[0].getMessage())


def test_JAXPTX_SIM_MALLOPT_0_leaves_the_allocator_alone(
        mallopt_calls, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAXPTX_SIM_MALLOPT", "0")
    with caplog.at_level(logging.DEBUG, logger="jaxptx.sim"):
        _launch_twice()
    assert mallopt_calls == [] and _records(caplog) == []


@pytest.mark.parametrize("setting, said", [(None, 1), ("1", 1), ("0", 0)])
def test_a_fresh_process_with_real_glibc(setting: str | None, said: int) -> None:
    """The same in a process of its own, with the real ``mallopt``."""
    env = {k: v for k, v in os.environ.items() if k != "JAXPTX_SIM_MALLOPT"}
    if setting is not None:
        env["JAXPTX_SIM_MALLOPT"] = setting
    code = ("import logging, numpy as np; from jaxptx import sim; import test_host_allocator as t; "
            "logging.basicConfig(level=logging.INFO, format='%(name)s %(levelname)s %(message)s'); "
            "t._launch_twice()")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(__file__))
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stderr.splitlines() if "malloc" in line]
    assert len(lines) == said, run.stderr[-3000:]
    if said:
        assert lines[0].startswith("jaxptx.sim INFO jaxptx.sim: raised glibc malloc's mmap threshold to 32 MiB")
