"""Runs one group of bad-input cases in this process and prints one JSON line
per case: the error class and message it raised, "no error", or "timeout".

Usage: ``python run_cases.py <group>``. Each case gets its own alarm, so a
hang costs only that case; a crash ends the process, and the test reports
every case that printed no line.
"""

from __future__ import annotations

import json
import signal
import sys
import warnings

from cases import CASES, PRELUDE

TIMEOUT_S = 20


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so no `except Exception` eats it."""


def _alarm(signum, frame):
    raise _Timeout()


def main(group: str) -> None:
    warnings.simplefilter("ignore")
    namespace: dict = {}
    exec(PRELUDE, namespace)
    signal.signal(signal.SIGALRM, _alarm)
    for case in CASES:
        if case.group != group:
            continue
        signal.alarm(TIMEOUT_S)
        try:
            exec(case.code, dict(namespace))
            result = {"id": case.id, "cls": None, "msg": "no error"}
        except _Timeout:
            result = {"id": case.id, "cls": "timeout", "msg": f"no result in {TIMEOUT_S} s"}
        except BaseException as e:  # noqa: BLE001 - the class is what we record
            result = {"id": case.id, "cls": type(e).__name__, "msg": str(e)}
        finally:
            signal.alarm(0)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
