"""The sanitizer's vector clocks (:mod:`jaxptx.sim.core.sanitizer.clocks`)
keep rows shared by the threads that synchronised together; every
operation must leave each thread's clock vector exactly as one dense row
per thread would (the model below: one ``(threads, columns)`` matrix)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx.sim.core.sanitizer.clocks import Clocks


class DenseClocks:
    """The reference: a full clock row per thread, joined elementwise."""

    def __init__(self, nctas: int, ntid: int) -> None:
        self.ntid = ntid
        n = nctas * ntid
        self.tid = np.arange(n) % ntid
        self.vc = np.zeros((n, ntid), dtype=np.int64)
        self.vc[np.arange(n), self.tid] = 1
        self.arrived: dict[int, np.ndarray] = {}
        self.released: dict[int, np.ndarray] = {}
        self.completed: dict[int, np.ndarray] = {}

    def column(self, k: int) -> int:
        col = self.ntid + k
        if col >= self.vc.shape[1]:
            self.vc = np.pad(self.vc, ((0, 0), (0, col + 1 - self.vc.shape[1])))
        return col

    def pad(self, row: np.ndarray) -> np.ndarray:
        return np.pad(row, (0, self.vc.shape[1] - len(row)))

    def tick(self, threads: np.ndarray) -> None:
        self.vc[threads, self.tid[threads]] += 1

    def join(self, threads: np.ndarray, extra: np.ndarray | None = None) -> None:
        joined = self.vc[threads].max(axis=0)
        if extra is not None:
            joined = np.maximum(joined, self.pad(extra))
        self.vc[threads] = joined
        self.tick(threads)

    def join_ctas(self, nctas: int) -> None:
        per_cta = self.vc.reshape(nctas, self.ntid, -1)
        per_cta[:] = per_cta.max(axis=1, keepdims=True)
        for key in list(self.arrived):
            per_cta[key // 16] = np.maximum(per_cta[key // 16], self.pad(self.arrived.pop(key)))
        self.tick(np.arange(len(self.vc)))

    def barrier_release(self, threads: np.ndarray, key: int) -> None:
        joined = self.vc[threads].max(axis=0)
        held = self.arrived.get(key)
        self.arrived[key] = joined if held is None else np.maximum(self.pad(held), joined)
        self.tick(threads)

    def barrier_complete(self, threads: np.ndarray, key: int) -> None:
        self.join(threads, self.arrived.pop(key, None))

    def acquire(self, threads: np.ndarray, held: np.ndarray) -> None:
        width = min(len(held), self.vc.shape[1])
        self.vc[threads, :width] = np.maximum(self.vc[threads, :width], held[:width])

    def mbarrier_release(self, threads: np.ndarray, word: int) -> None:
        joined = self.vc[threads].max(axis=0)
        held = self.released.get(word)
        self.released[word] = joined if held is None else np.maximum(self.pad(held), joined)
        self.tick(threads)

    def mbarrier_complete(self, word: int) -> None:
        held = self.released.pop(word, None)
        if held is not None:
            done = self.completed.get(word)
            self.completed[word] = held if done is None else np.maximum(self.pad(done), self.pad(held))

    def mbarrier_acquire(self, threads: np.ndarray, word: int) -> None:
        held = self.completed.get(word)
        if held is not None:
            self.acquire(threads, self.pad(held))


def _same(clocks: Clocks, dense: DenseClocks) -> None:
    n, width = dense.vc.shape
    got = np.stack([clocks.row(t)[:width] for t in range(n)])
    np.testing.assert_array_equal(got, dense.vc)
    assert not np.any(np.stack([clocks.row(t)[width:] for t in range(n)]))   # spare columns stay zero
    threads = np.arange(n)
    np.testing.assert_array_equal(clocks.own(threads), dense.vc[threads, dense.tid])
    others = (threads * 7 + 3) % dense.ntid
    np.testing.assert_array_equal(clocks.knows(threads, others), dense.vc[threads, others])
    np.testing.assert_array_equal(clocks.knows(threads, dense.tid), dense.vc[threads, dense.tid])


@pytest.mark.parametrize("seed", range(12))
def test_shared_rows_hold_what_dense_clocks_hold(seed: int) -> None:
    """Random barriers, arrivals, mbarrier phases, acquisitions, grid-wide
    joins and new mbarrier columns on 3 CTAs of 40 threads (a partial last
    warp): after every operation each thread's vector, own entry and
    ``knows`` answers equal the dense model's, and ``joined`` is the
    elementwise maximum."""
    rng = np.random.default_rng(seed)
    nctas, ntid = 3, 40
    clocks, dense = Clocks(nctas, ntid), DenseClocks(nctas, ntid)
    columns = 0

    def some(cta: int | None = None) -> np.ndarray:
        c = int(rng.integers(nctas)) if cta is None else cta
        picked = np.flatnonzero(rng.random(ntid) < rng.choice([0.2, 0.6, 1.0])) + c * ntid
        return picked if len(picked) else np.array([c * ntid], dtype=np.int64)

    for _ in range(60):
        op = rng.integers(9)
        if op == 0:
            t = some()
            clocks.join(t)
            dense.join(t)
        elif op == 1:
            t, key = some(), int(rng.integers(2))
            key += int(t[0]) // ntid * 16
            clocks.barrier_release(t, key)
            dense.barrier_release(t, key)
        elif op == 2:
            c = int(rng.integers(nctas))
            t, key = some(c), c * 16 + int(rng.integers(2))
            clocks.barrier_complete(t, key)
            dense.barrier_complete(t, key)
        elif op == 3:
            clocks.join_ctas(nctas)
            dense.join_ctas(nctas)
        elif op == 4:
            t, word = some(), int(rng.integers(3))
            clocks.mbarrier_release(t, np.full(len(t), word))
            dense.mbarrier_release(t, word)
        elif op == 5:
            word = int(rng.integers(3))
            clocks.mbarrier_complete(word)
            dense.mbarrier_complete(word)
        elif op == 6:
            t, word = some(), int(rng.integers(3))
            clocks.mbarrier_acquire(t, np.full(len(t), word))
            dense.mbarrier_acquire(t, word)
        elif op == 7 and columns < 20:
            assert clocks.column(columns) == dense.column(columns)
            col, value = dense.ntid + columns, int(rng.integers(1, 9))
            columns += 1
            t = some()
            clocks.raise_column(t, col, value)
            held = np.zeros(col + 1, dtype=np.int64)
            held[col] = value
            dense.acquire(t, held)
        else:
            t = some()
            clocks.tick(t)
            dense.tick(t)
        _same(clocks, dense)
        t = some()
        np.testing.assert_array_equal(clocks.joined(t)[:dense.vc.shape[1]], dense.vc[t].max(axis=0))


def test_a_grid_wide_barrier_makes_one_row_per_cta() -> None:
    """After a barrier of every thread, the threads of a CTA share one
    row: a join costs the CTA's rows, not one per thread; compaction keeps
    the table from growing with the number of barriers."""
    clocks = Clocks(4, 128)
    for _ in range(50):
        clocks.join_ctas(4)
    assert len(np.unique(clocks.row_of)) == 4
    assert len(clocks.table) <= 64
    np.testing.assert_array_equal(clocks.own(np.arange(4 * 128)), np.full(4 * 128, 51))
    assert clocks.knows(np.array([0]), np.array([5]))[0] == 50
