"""The profiler's counting fast paths (one gather by ascending threads;
shared words out of order) count exactly what the general paths count."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx.profile import requests
from jaxptx.profile.requests import LineCounts


class _Counter:
    """What :func:`requests._global` needs of a :class:`Counter`."""

    def __init__(self) -> None:
        self._warp_shift = 5
        self.touched: dict[int, np.ndarray] = {}
        self._buffers: dict[int, int] = {}

    def warp_of(self, threads: np.ndarray) -> np.ndarray:
        return threads >> 5

    def buffer_id(self, buf: np.ndarray) -> int:
        return self._buffers.setdefault(id(buf), len(self._buffers))


def _counted(records: list[tuple], general: bool) -> tuple[LineCounts, np.ndarray]:
    c, line = _Counter(), LineCounts()
    if general:     # the same access split in two records takes the general (sorting) path
        (buf, off, thr, width, kind), = records
        half = len(thr) // 2
        records = [(buf, off[:half], thr[:half], width, kind), (buf, off[half:], thr[half:], width, kind)]
    requests._global(c, line, records)
    return line, next(iter(c.touched.values()))


@pytest.mark.parametrize("case", ["coalesced", "masked", "strided", "misaligned", "reversed"])
@pytest.mark.parametrize("width", [1, 4, 8])
def test_one_gather_counts_as_the_general_path(case: str, width: int) -> None:
    rng = np.random.default_rng(0)
    thr = np.arange(5, 5 + 3 * 128, dtype=np.int64)
    if case == "masked":
        thr = thr[rng.random(len(thr)) < 0.7]
    off = thr * width
    if case == "strided":
        off = thr * 3 * width
    elif case == "misaligned":
        off = thr * width + 12
    elif case == "reversed":
        off = (thr.max() - thr) * width
    buf = np.zeros(int(off.max()) + 64, dtype=np.uint8)
    records = [(buf, off.astype(np.uint64), thr, width, "load")]
    fast, fast_touched = _counted(records, general=False)
    slow, slow_touched = _counted(records, general=True)
    assert fast == slow
    np.testing.assert_array_equal(fast_touched, slow_touched)
    assert fast.global_requests == len(np.unique(thr >> 5))


def test_shared_words_out_of_order_count_as_sorted() -> None:
    keys = ((np.arange(512) >> 5) << 20) | (np.arange(512) % 4)      # lanes reading word lane % 4
    np.testing.assert_array_equal(requests._distinct_words(keys, 4), np.unique(keys))
    scrambled = keys[np.random.default_rng(1).permutation(len(keys))]
    np.testing.assert_array_equal(requests._distinct_words(scrambled, 4), np.unique(keys))
    np.testing.assert_array_equal(requests._distinct_words(keys, 1 << 16), np.unique(keys))   # too wide: sorted
