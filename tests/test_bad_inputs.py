"""Bad inputs across every layer (parser and check, the emulator's precheck,
the emulator, the DSL and launch limits, the JAX path) each fail with a named
error class and a message that says what is wrong; none may hang, crash or
pass silently.

The cases (tests/bad_inputs/cases.py) run in one subprocess per layer
(tests/bad_inputs/run_cases.py), each case under its own alarm: a hang
fails only that case, a crash fails the cases its process never reached.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "bad_inputs"))
from cases import CASES  # noqa: E402

GROUPS = sorted({c.group for c in CASES})
_RESULTS: dict[str, dict[str, dict]] = {}


def _results(group: str) -> dict[str, dict]:
    if group not in _RESULTS:
        proc = subprocess.run([sys.executable, str(HERE / "bad_inputs" / "run_cases.py"), group],
                              cwd=HERE.parent, capture_output=True, text=True, timeout=600,
                              env={**__import__("os").environ, "PYTHONPATH": str(HERE / "jax")})
        found = {}
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                found[r["id"]] = r
        if proc.returncode != 0:
            found["<process>"] = {"cls": f"exit {proc.returncode}", "msg": proc.stderr[-2000:]}
        _RESULTS[group] = found
    return _RESULTS[group]


def test_there_are_at_least_80_cases_with_unique_names():
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.group}: {c.id}")
def test_bad_input_is_refused_clearly(case):
    results = _results(case.group)
    got = results.get(case.id)
    assert got is not None, f"no result: the process crashed or hung before this case ({results.get('<process>')})"
    assert got["cls"] != "timeout", f"hung: {got['msg']}"
    assert got["cls"] is not None, "accepted silently"
    assert re.fullmatch(case.cls, got["cls"]), f"raised {got['cls']}: {got['msg']}"
    assert re.search(case.match, got["msg"], re.S), f"unclear message: {got['msg']}"
