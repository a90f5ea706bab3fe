"""One trace file analysed afresh: read (or its parsed columns from the parse cache), the
pipeline run on it, and its tables computed as one rank.

:func:`analyse_file` is the whole of what a file goes through (:class:`Options` says how);
:func:`fresh` adds its tables (:func:`tracekit.ranks.tables.tables_of`), packed as a worker sends
them back. Both the per-file work (:mod:`tracekit.ranks.perfile`) and the result cache, which
analyses a file again when its entry is gone (:mod:`tracekit.ranks.results`), call in here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import pandas as pd

from .. import progress
from ..perf.devices import Peaks
from ..perf.devices import resolve as resolve_peaks
from ..pipeline import MEMORY, Attributed, run
from ..pipeline.taxonomy import kernel_rules, module_taxonomy
from ..read.reader import DEFAULT_MAX_BYTES, read_trace
from ..strings import with_python_strings
from .gathered import pack_tables
from .grouping import host_of, process_of
from .merged import split_ranks
from .tables import tables_of


@dataclass
class Options:
    taxonomy: str | None = None
    kernel_rules: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    cache: bool = True
    #: Processes that decode one big plain file (:mod:`tracekit.read.parallel`); 1 in a rank pool.
    read_jobs: int = 1
    #: The host of the process that gathers the results (set for a Dask cluster): a worker on
    #: another host sends the intervals back, since a handle to its cache would not be readable.
    host: str | None = None
    #: Device peaks: a devices TOML tried before the built-in table, and explicit values
    #: (``--peak-tflops``: a number or ``dtype=number,...``; ``--peak-bandwidth`` in TB/s).
    devices: str | None = None
    peak_tflops: str | None = None
    peak_bandwidth: float | None = None
    #: The tables the output needs (None: every one): a worker computes only these, and the
    #: pipeline runs only the optional steps they need (:attr:`features`).
    tables: tuple[str, ...] | None = None
    #: Long per-event series (the memory timeline) whole instead of thinned to a chart's points.
    full_series: bool = False
    #: Whether the parent may read a rank's intervals after its tables (a view, ``--per-step``,
    #: the filters). When not, and no result cache holds them, a worker sends back a handle
    #: that analyses the file again if they are read after all (:mod:`tracekit.ranks.again`).
    keep_intervals: bool = True

    @property
    def features(self) -> frozenset[str]:
        """The pipeline's optional steps :attr:`tables` need
        (:func:`tracekit.analyses._registry.features_of`)."""
        from tracekit.analyses._registry import features_of

        return features_of(self.tables)

    def peaks(self, device_names: list[str]) -> Peaks:
        """The peaks a file whose ``deviceProperties`` names are ``device_names`` is measured against."""
        return resolve_peaks(device_names, self.devices, self.peak_tflops, self.peak_bandwidth)


def analyse_file(path: str | os.PathLike, options: Options, store_parsed: bool = True) -> Attributed:
    """Read one trace file and run the pipeline (:mod:`tracekit.pipeline`) on it; its parsed
    columns are stored in the parse cache only when ``store_parsed``. A file that holds several
    ranks (:mod:`tracekit.ranks.merged`): its first; :func:`analyse_parts` gives them all."""
    return analyse_parts(path, options, store_parsed)[0]


# Not redundant with pool._Attempt and the API's methods: a lazy rank is analysed again here
# when Attributed.intervals or Analysis.filtered reads it (ranks/again.py, results.py), under
# the caller's setting (tests/unit/test_python_strings.py).
@with_python_strings
def analyse_parts(path: str | os.PathLike, options: Options, store_parsed: bool = True) -> list[Attributed]:
    """:func:`analyse_file` of every rank the file holds: one, or the ranks a merging tool
    wrote into it (:func:`tracekit.ranks.merged.split_ranks`), in process order."""
    tax = module_taxonomy(options.taxonomy)
    rules = kernel_rules(options.kernel_rules)
    raw = _read(path, options, store_parsed)
    progress.fraction(progress.DECODED)
    out = []
    features = options.features
    parts = split_ranks(raw) or [raw]
    del raw  # each part is let go once it is analysed: the events are never held twice
    while parts:  # each part is passed on, not held: run() lets its frames go as it ends
        warnings, meta = parts[0].warnings, parts[0].meta
        pid = process_of(parts[0].events)
        att = run(parts.pop(0), tax, rules, options.peaks(meta.get("devices") or []), features)
        att.warnings[:0] = warnings
        att.meta.update({k: meta[k] for k in ("rank", "world_size", "devices", "events_in_file")})
        att.meta["device_categories"] = meta.get("device_categories", [])
        if "rank_split" in meta:
            att.meta["rank_split"] = meta["rank_split"]
        att.meta["pid"] = pid
        att.meta["host"] = host_of(path, meta.get("host_name"))
        out.append(att)
    progress.fraction(progress.LINKED)
    return out


def _read(path: str | os.PathLike, options: Options, store: bool = True):
    """The parsed columns of ``path``: from its Parquet cache when valid, else read (and
    cached, when ``store``)."""
    if not options.cache:  # nothing is stored: the memory events are read only when needed
        memory = MEMORY in options.features
        return read_trace(path, options.max_bytes, options.read_jobs, memory=memory)
    from ..read import cache

    raw = cache.load(path, options.max_bytes)
    if raw is None:
        try:  # the identity of the bytes about to be read; checked again before storing
            key = cache.file_key(path, options.max_bytes) if store else None
        except OSError:
            key = None
        raw = read_trace(path, options.max_bytes, options.read_jobs)
        if key is not None:
            cache.store(raw, path, options.max_bytes, key)
    return raw


#: A file at most this big on disk is kept in the cache as its result only (one entry, not a
#: parse cache entry as well): decoding it again, when its result cannot be used (other rule
#: files), costs about what writing and reading its parsed columns would.
SMALL_FILE = 4 << 20


def fresh(path: str | os.PathLike, options: Options, cached: bool) -> list[tuple[Attributed, dict]]:
    """:func:`analyse_parts` and each part's tables as one rank, packed (what the result cache
    stores as it is, and what the parent gathers): one pair, or one per rank of a merged file.
    ``cached``: the result will be stored in the result cache, so a small file's parsed columns
    are not (see :data:`SMALL_FILE`)."""
    parts = analyse_parts(path, options, store_parsed=not cached or not _small(path))
    # Module instances are read by no table or view after the pipeline: neither stored nor
    # sent back (they were a tenth of what the parent kept per rank).
    # Packed once (what the parent gathers, and what the result cache stores as it is).
    return [pack_tables(replace(att, modules=pd.DataFrame()), tables_of(att, path, options)) for att in parts]


def _small(path: str | os.PathLike) -> bool:
    try:
        return os.stat(path).st_size <= SMALL_FILE
    except OSError:
        return False
