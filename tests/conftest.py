"""pytest configuration shared by the test suite."""

import sys
from pathlib import Path

# tests import helper modules (e.g. `from synthetic import make_trace`) from this folder
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
