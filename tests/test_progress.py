"""The progress events a listener (the CLI's bar) receives: rising fractions, one done per file."""

from __future__ import annotations

import tracekit
from tracekit import progress
from tracekit.read.reader import CHUNK_BYTES
from tracekit.testing import llama_training, write_trace


def test_progress_rises_and_each_file_finishes(tmp_path):
    trace, _ = llama_training(n_layers=2, n_steps=2)
    # Pad with instant events (ignored by the analysis) so the file decodes in several slices.
    pad = {"ph": "i", "cat": "cpu_instant_event", "name": "x" * 200, "pid": 1, "tid": 1, "ts": 0}
    trace["traceEvents"] += [pad] * (3 * CHUNK_BYTES // 250)
    d = tmp_path / "ranks"
    d.mkdir()
    for r in range(2):
        write_trace(d / f"rank{r}.pt.trace.json.gz", trace)
    seen = []
    with progress.listening(lambda ev, v: seen.append((ev, v))):
        tracekit.load(d, cache=False, jobs=1)
    assert [e for e, _ in seen].count("done") == 2
    fractions = [v for e, v in seen if e == "fraction"]
    assert fractions and all(0.0 <= v <= 1.0 for v in fractions)
    first_file = fractions[: len(fractions) // 2]
    assert first_file == sorted(first_file)


def test_nobody_listening_costs_nothing_and_says_nothing(tmp_path):
    trace, _ = llama_training(n_layers=1, n_steps=1)
    a = tracekit.load(write_trace(tmp_path / "t.json", trace), cache=False)
    assert a.tables()["idle"].shape[0] == 1


def test_the_terminal_bar_runs_no_thread_and_still_draws(tmp_path, monkeypatch):
    """The CLI's bar is drawn from the progress events: a refresh thread would keep the one big
    file of a run from being decoded and tabulated by forked processes (which need a process
    with one thread), as it did for every run at a terminal."""
    import io
    import threading

    from tracekit.cli import io as cli_io

    trace, _ = llama_training(n_layers=2, n_steps=2)
    f = write_trace(tmp_path / "t.json", trace)
    err = io.StringIO()
    err.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr(cli_io.sys, "stderr", err)
    monkeypatch.setattr(cli_io, "REDRAW_SECONDS", 0.0, raising=False)
    before, during = threading.active_count(), []

    def load(path, **kw):
        during.append(threading.active_count())
        for x in (0.2, 0.6):
            progress.fraction(x)
        return tracekit.load(path, **kw)

    a = cli_io.load_with_progress(load, f, cache=False)
    assert a.tables()["idle"].shape[0] == 1
    assert during == [before]
    assert "analysing t.json" in err.getvalue()
