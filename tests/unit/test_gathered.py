"""tracekit.ranks.gathered: the parent's compact copy of every rank's small tables gives back exactly
the frames that were added (values, dtypes, category order, column index), one at a time or
concatenated as pd.concat would."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.ranks.gathered import Computed, RankTables


def _frame(rng: np.random.Generator, n: int, cats: list[str]) -> pd.DataFrame:
    names = np.array(["a", "b", "ccc", "k" * 40, "é"], dtype=object)
    s = pd.Series(names[rng.integers(0, 5, n)], dtype="str")
    s[rng.random(n) < 0.2] = np.nan
    return pd.DataFrame(
        {
            "name": s,
            "phase": pd.Categorical(rng.choice(cats, n), categories=cats),
            "label": pd.Series(list(names[rng.integers(0, 5, n)]), dtype=object),
            "count": rng.integers(0, 9, n).astype(np.int64),
            "ms": np.where(rng.random(n) < 0.1, np.nan, rng.random(n)),
            "ok": rng.random(n) < 0.5,
        }
    )


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a, b, check_exact=True, check_categorical=True)
    assert list(a.dtypes) == list(b.dtypes) and a.columns.dtype == b.columns.dtype
    for c in a.columns:
        if isinstance(a[c].dtype, pd.CategoricalDtype):
            assert list(a[c].cat.categories) == list(b[c].cat.categories)


def test_frames_come_back_exactly():
    rng = np.random.default_rng(5)
    store, added = RankTables(), {}
    for slot in range(40):
        cats = ["forward", "backward", "optimizer"] if slot % 3 else ["optimizer", "forward", "backward"]
        tables = {("mean", "t"): _frame(rng, int(rng.integers(0, 30)), cats)}
        tables[("mean", "empty")] = pd.DataFrame(columns=["phase", "count"])  # object columns
        tables[("mean", "index")] = pd.DataFrame({"x": [1.0, 2.0]}, index=[5, 6])  # kept whole
        tables[("checks", "")] = ["a warning"] if slot % 5 == 0 else []
        store.add(slot, tables)
        added[slot] = tables
    for slot, tables in added.items():
        for key, want in tables.items():
            got = store.frame(key, slot)
            if isinstance(want, pd.DataFrame):
                _same(want, got)
            else:
                assert got == want


def test_concat_is_pd_concat_when_all_alike_and_none_otherwise():
    rng = np.random.default_rng(6)
    store, frames = RankTables(), {}
    for slot in range(12):
        frames[slot] = _frame(rng, int(rng.integers(0, 10)), ["x", "y"])
        store.add(slot, {("mean", "t"): frames[slot]})
    order = [3, 0, 11, 5, 7]
    got, lengths = store.concat(("mean", "t"), order)
    _same(pd.concat([frames[s] for s in order], ignore_index=True), got)
    assert lengths == [len(frames[s]) for s in order]
    store.add(12, {("mean", "t"): _frame(rng, 3, ["y", "x"])})  # other category order: other schema
    assert store.concat(("mean", "t"), [0, 12]) is None
    computed = Computed(store, {10: 0, 20: 12})
    assert ("mean", "t", 10) in computed and ("mean", "t", 30) not in computed
    computed[("mean", "t", 10)] = "own"
    assert computed[("mean", "t", 10)] == "own" and computed.concat("mean", "t", [10]) is None


def test_a_packed_frame_is_the_frame():
    """What a worker sends (pack) loads back as the frame, and gathers as the frame would."""
    from tracekit.ranks.gathered import pack

    rng = np.random.default_rng(7)
    store = RankTables()
    for slot in range(6):
        df = _frame(rng, int(rng.integers(0, 12)), ["b", "a"])
        _same(df, pack(df).load())
        store.add(slot, {("mean", "t"): pack(df) if slot % 2 else df})
        _same(df, store.frame(("mean", "t"), slot))
    assert pack(pd.DataFrame({"x": [1]}, index=[3])).index.tolist() == [3]  # not packed: itself


def test_a_gathered_rank_keeps_its_memory_rows_compressed_and_gives_them_back():
    """tracekit.ranks.zipped, then RankTables.gather: a rank's memory rows are kept as one
    compressed blob (not columns in the store) and read back exactly; a rank with none keeps
    its empty frame in the store."""
    from tracekit.pipeline import Attributed
    from tracekit.ranks.gathered import pack
    from tracekit.ranks.zipped import zipped

    rng = np.random.default_rng(7)
    store = RankTables()
    rows = _frame(rng, 500, ["forward", "backward"])
    empty = rows.iloc[:0].reset_index(drop=True)
    got = {}
    for slot, memory in enumerate((rows, empty)):
        att = Attributed(
            path=f"r{slot}",
            mode="cpu",
            intervals=pd.DataFrame({"step": [1]}),
            steps=pd.DataFrame({"step": [1]}),
            windows=pd.DataFrame({"step": [1]}),
            memory=pack(memory),
        )
        got[slot] = store.gather(slot, *zipped((att, {})))
    assert not store.has(("att", "memory"), 0) and store.has(("att", "memory"), 1)
    blob = got[0].__dict__["_memory"].blob
    assert len(blob) < rows.memory_usage(deep=True).sum() / 4
    _same(rows, got[0].memory)
    _same(rows, got[0].memory)  # each read is a new frame from the same blob
    _same(empty, got[1].memory)
