"""Render: tables to what a person reads.

Takes in: the tables (``{name: DataFrame}``), each described by its spec in the table registry
(:mod:`tracekit.analyses`), and the run's ``meta``. Gives out: terminal tables, an HTML report,
JSON / CSV / Markdown / Parquet files; names made safe for a terminal once, at this boundary.

Open first: :mod:`tracekit.render.common` (what every renderer shows of a table, from its spec).
Then :mod:`~tracekit.render.terminal` (+ :mod:`~tracekit.render.fasttable`),
:mod:`~tracekit.render.html`, :mod:`~tracekit.render.formats`, :mod:`~tracekit.render.explain`
(``tracekit explain``'s text) and :mod:`~tracekit.render.safetext` (control and bidi characters
out of names).
"""
