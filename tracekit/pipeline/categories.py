"""Step ``assign_categories``: the labels of the paper's tables, applied once from the rules data
(:mod:`tracekit.pipeline.labels`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import labels
from .stages import pass_index
from .state import Trace, add_columns
from .taxonomy import KernelRules, ModuleTaxonomy

#: Label columns stored as categoricals in the final interval table.
CATEGORICAL = ("group", "kernel_category", "rule", "collective", "module", "module_rule", "block")


def assign_categories(t: Trace, taxonomy: ModuleTaxonomy, rules: KernelRules) -> Trace:
    """Label every activity with its group, kernel category, collective, module category and
    timeline block, each with the rule that gave it.

    Needs: ``acts.kind``, ``name``, ``op``, ``top_op``, ``top_op_ts``, ``top_op_id``,
    ``comm_text``, ``module_id``, ``rope_frame``, ``backward_node``, ``launch_ts``, ``step``;
    ``t.modules``.
    Adds on ``acts``: the columns of :func:`tracekit.pipeline.labels.assign_categories` (``group``,
    ``kernel_category``, ``rule``, ``collective``, ``module`` ("" unless compute),
    ``module_rule``, ``block``), and ``fwd_pass`` (forward pass of the model in
    progress at launch, -1 none), ``is_gemm``. On ``t.modules``: ``category``, ``rule``,
    ``own_category``, ``own_rule``, ``att_root``.
    Guarantees: every activity gets exactly one label of each kind.
    """
    a = t.acts
    lab = labels.assign_categories(t, taxonomy, rules)
    cols = {c: lab[c].array for c in lab.columns}
    cols["fwd_pass"] = pass_index(t.modules, a["launch_ts"].to_numpy())
    cols["is_gemm"] = ((lab["group"] == "compute") & (lab["kernel_category"] == "GEMM")).to_numpy()
    t.acts = add_columns(a, cols)
    return t


def as_categories(frame: pd.DataFrame, columns: tuple[str, ...] = CATEGORICAL) -> pd.DataFrame:
    """The label ``columns`` as categoricals (of the values present); a categorical column
    whose categories all appear is kept as it is."""
    for c in columns:
        if c in frame:
            col = frame[c]
            if not isinstance(col.dtype, pd.CategoricalDtype):
                frame[c] = col.astype("category")
            elif not _all_used(col):
                frame[c] = col.cat.remove_unused_categories()
    return frame


def _all_used(col: pd.Series) -> bool:
    """Every category of a categorical column appears in it (removing unused ones is a no-op)."""
    codes = col.array.codes
    n = len(col.dtype.categories)
    return bool((np.bincount(codes[codes >= 0], minlength=n)[:n] > 0).all())
