"""tracekit.ranks.batches: every rank's frame read a batch at a time gives what reading them one
by one and concatenating gives, with each row's rank, whether the frames were gathered alike,
gathered unlike, or held by the ranks themselves."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from tracekit.ranks import batches
from tracekit.ranks.gathered import Computed, RankTables


def _steps(rng: np.random.Generator, n: int, cats: list[str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "step": np.arange(n, dtype=np.int64),
            "window": pd.Categorical(rng.choice(cats, n), categories=cats),
            "overlap_ns": rng.integers(0, 10**12, n).astype(np.int64),
            "complete": rng.random(n) < 0.7,
        }
    )


def _run(n_ranks: int, unlike: set[int], gathered: bool) -> SimpleNamespace:
    rng = np.random.default_rng(n_ranks)
    ranks, store, slots = {}, RankTables(), {}
    for i in range(n_ranks):
        r = 3 * i + 1  # rank numbers unlike their positions
        cats = ["step", "forward"] if i not in unlike else ["forward", "step"]
        ranks[r] = SimpleNamespace(steps=_steps(rng, int(rng.integers(0, 6)), cats))
        store.add(i, {("att", "steps"): ranks[r].steps})
        slots[r] = i
    return SimpleNamespace(ranks=ranks, _computed=Computed(store, slots) if gathered else {})


def _one_by_one(run: SimpleNamespace, order: list[int]) -> tuple[np.ndarray, pd.DataFrame]:
    frames = [run.ranks[r].steps for r in order]
    rank = np.concatenate([np.full(len(f), r, np.int64) for f, r in zip(frames, order)])
    return rank, pd.concat(frames, ignore_index=True)


def _stacked(run: SimpleNamespace, order: list[int]) -> tuple[np.ndarray, list[pd.DataFrame]]:
    got = list(batches.stacked(run, "steps", order))
    assert all(len(r) == len(f) for r, f in got)
    assert len(got) == -(-len(order) // batches.BATCH)
    return np.concatenate([r for r, _ in got]), [f for _, f in got]


def test_stacked_rows_and_ranks_are_the_ranks_frames_in_order():
    for unlike, gathered in ((set(), True), ({5, 130}, True), (set(), False)):
        run = _run(150, unlike, gathered)
        order = sorted(run.ranks, key=lambda r: (r % 7, r))  # not the order they were added in
        rank, parts = _stacked(run, order)
        want_rank, want = _one_by_one(run, order)
        assert rank.tolist() == want_rank.tolist()
        got = pd.concat(parts, ignore_index=True)
        cols = ["step", "overlap_ns", "complete"]
        pd.testing.assert_frame_equal(got[cols], want[cols], check_exact=True)
        assert got["window"].astype(str).tolist() == want["window"].astype(str).tolist()


def test_frames_are_each_ranks_own():
    run = _run(100, {70}, True)
    order = list(run.ranks)[::-1]
    seen = []
    for r, f in batches.frames(run, "steps", order):
        seen.append(r)
        want = run.ranks[r].steps
        pd.testing.assert_frame_equal(
            f.reset_index(drop=True)[["step", "overlap_ns"]], want[["step", "overlap_ns"]]
        )
    assert seen == order
