"""``tracekit cache info|clear``: the cache of parsed traces, seen and emptied from the command line."""

from __future__ import annotations

import click


@click.group(name="cache")
def cache_group() -> None:
    """The cache of parsed traces and their analysis results (in $TRACEKIT_CACHE_DIR,
    $XDG_CACHE_HOME/tracekit or ~/.cache/tracekit; bounded by $TRACEKIT_CACHE_MAX_BYTES,
    default 2 GiB)."""


@cache_group.command(name="info")
def cache_info() -> None:
    """Where the cache is, how many entries and bytes it holds, and its bound."""
    from ..read import cache
    from ..render.safetext import bounded

    i = cache.info()
    n = i["result_entries"]
    click.echo(
        f"{bounded(i['directory'])}: {i['entries']} entries ({n} analysis result{'s' if n != 1 else ''}), "
        f"{i['bytes']:,} bytes (bound {i['max_bytes']:,} bytes)"
    )


@cache_group.command(name="clear")
def cache_clear() -> None:
    """Remove every cached trace and analysis result."""
    from ..read import cache
    from ..render.safetext import bounded

    n = cache.clear()
    click.echo(f"removed {n} file{'s' if n != 1 else ''} from {bounded(cache.cache_dir())}")
