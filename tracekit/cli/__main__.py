"""``python -m tracekit.cli``: the ``tracekit`` command."""

from .commands import main

if __name__ == "__main__":
    main()
