"""Assign categories: the one step that labels activities from the taxonomy data.

Kernel rules (``tracekit/data/kernels.toml``) and module rules (``tracekit/data/modules.toml``)
are applied here and nowhere else. Every label comes with the rule that gave it (``rule``,
``module_rule``), so a user can ask why a kernel landed where it did.

Rule ids read ``<source>#<category>:<n>``: the n-th ``[[rule]]`` (1-based) of the built-in file
(``kernels.toml`` / ``modules.toml``) or of a user's file (``user:<file name>``). Labels that
come from structure rather than a rule say so: ``comm:<collective source>``, ``memcpy``,
``attention:<part>`` (the split of an attention block's own ops), ``rope-frame`` (an op under
a rotary python frame), ``none`` (no rule matched: Other).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..read.reader import MEMCPY, MEMSET
from .blocks import blocks
from .composite_attention import composite_parts, projection_parts
from .heads import head_ops, head_places
from .modules import inherit
from .state import Coded, categorical_take, codes_of, distinct_rows, str_column, str_in, take
from .state import Trace as LinkedTrace
from .taxonomy import COMM_CATEGORIES, KernelRules, ModuleTaxonomy


def assign_categories(linked: LinkedTrace, taxonomy: ModuleTaxonomy, rules: KernelRules) -> pd.DataFrame:
    """Kernel and module categories of every activity, one row per row of ``linked.activities``.

    Needs: activity columns ``name``, ``kind``, ``op``, ``top_op``, ``top_op_ts``,
    ``top_op_id``, ``comm_text``, ``module_id``, ``rope_frame``, ``backward_node``,
    ``launch_ts``, ``step``; module-table columns ``cls``, ``qualname``, ``parent``,
    ``position``, ``siblings``, ``start``, ``end``, ``is_layer``, ``layer``.
    Adds (to ``linked.modules``): ``category``, ``own_category``, ``rule``, ``att_root``.
    Returns columns: ``group`` (compute / comm / memcpy / memset), ``kernel_category``,
    ``rule``, ``collective``, ``module`` (paper category; "" unless compute), ``module_rule``,
    ``block`` (timeline).
    Guarantees: every activity gets exactly one value of each; categories come only from the
    rules of ``taxonomy`` and ``rules``.
    """
    mod_labels = label_modules(linked.modules, taxonomy)
    a = linked.activities
    group = groups(linked, rules)
    kcat, krule, coll = kernel_categories(a, group, rules, linked.mode)
    module, mrule = module_categories(linked, taxonomy, kcat, mod_labels)
    other = ~group.is_("compute")
    return pd.DataFrame(
        {
            "group": group.categorical(),
            "kernel_category": kcat,
            "rule": krule,
            "collective": coll,
            "module": module.where(other, "").categorical(),
            "module_rule": mrule.where(other, "").categorical(),
            "block": blocks(linked).categorical(),
        },
        index=a.index,
    )


def other_share(iv: pd.DataFrame) -> float:
    """Coverage of the kernel rules: the share of compute-kernel time (sum of durations) that
    no rule names (kernel category Other); 0.0 with no compute kernels."""
    compute = str_in(iv["group"], ("compute",))
    dur = (iv["end"] - iv["start"]).to_numpy()[compute]
    total = float(dur.sum())
    if total <= 0:
        return 0.0
    other = str_in(iv["kernel_category"], ("Other",))[compute]
    return round(float(dur[other].sum()) / total, 6)


def _matches(col: pd.Series, rx, full: bool = False) -> np.ndarray:
    """``rx.search`` (``fullmatch`` with ``full``) over a categorical column, evaluated once
    per distinct value."""
    cats = col.cat.categories
    test = rx.fullmatch if full else rx.search
    hit = np.array([bool(test(str(c))) for c in cats] + [False], dtype=bool)
    return hit[col.array.codes]


#: The activity groups, in the order of their codes (:func:`groups`).
GROUPS = np.array(["compute", "comm", "memcpy", "memset"], dtype=object)


def groups(linked: LinkedTrace, rules: KernelRules) -> Coded:
    """compute / comm / memcpy / memset per activity (comm by the kernel name; on CPU traces
    by the op name or a collective recorded on the CPU side), as codes into :data:`GROUPS`."""
    a = linked.activities
    kind = a["kind"].to_numpy()
    if linked.mode == "gpu":
        is_comm = _matches(a["name"], rules.comm_kernel)
        code = np.where(kind == MEMCPY, 2, np.where(kind == MEMSET, 3, np.where(is_comm, 1, 0)))
    else:
        is_comm = _matches(a["name"], rules.comm_op) | ~str_in(a["comm_text"], ("",))
        code = np.where(is_comm, 1, 0)
    return Coded(code.astype(np.intp), GROUPS)


def _kernel_label(
    rules: KernelRules, name: str, op: str, leaf: str, comm: str, group: str, mode: str
) -> tuple[str, str, str]:
    """(kernel_category, rule, collective) of one distinct activity. A CPU trace's collective
    is the call's (``comm``: its "Collective name" or name), before the activity's own name:
    gloo runs a ``c10d::_reduce_scatter_base_`` as a ``gloo:all_reduce`` range."""
    if group == "comm":
        if mode == "cpu":
            c, src = rules.collective_source(("call", comm), ("kernel", name), ("op", leaf))
        else:
            c, src = rules.collective_of(name, comm, leaf)
        return (c if c in COMM_CATEGORIES else "Other"), f"comm:{src}", c
    if group in ("memcpy", "memset"):
        return ("Memcpy" if group == "memcpy" else "Memset"), group, ""
    cat, rule = rules.classify(name, f"{leaf} {op}")
    return cat, rule, ""


def kernel_categories(
    a: pd.DataFrame, group: Coded, rules: KernelRules, mode: str = "gpu"
) -> tuple[pd.Categorical, pd.Categorical, pd.Categorical]:
    """(kernel_category, rule, collective) per activity; rules applied once per distinct case
    of (name, top op, op, collective text, group), found on the columns' integer codes, and
    once per process (kept in ``rules.memo``, bounded: the ranks of a run share their cases)."""
    parts = [codes_of(a[c]) for c in ("name", "top_op", "op", "comm_text")]
    parts.append((group.codes, group.values))
    key, first = distinct_rows(*(codes for codes, _ in parts))
    cases = [(*c, mode) for c in zip(*(uniq[codes[first]].tolist() for codes, uniq in parts))]
    memo = rules.remembered()
    labels = [memo[c] if c in memo else memo.setdefault(c, _kernel_label(rules, *c)) for c in cases]
    arange = np.arange(len(key))
    return tuple(
        categorical_take(np.array([x[i] for x in labels], dtype=object), key, arange, "") for i in range(3)
    )


def label_modules(mods: pd.DataFrame, taxonomy: ModuleTaxonomy) -> tuple[Coded, Coded] | None:
    """Add ``own_category`` / ``own_rule`` (the first rule matching the module itself, "" when
    none), ``category`` / ``rule`` (inherited from the nearest labelled ancestor, else Other /
    none) and ``att_root`` (the outermost attention module around it, -1) to the module table;
    returns ``category`` and ``rule`` as codes (None with no modules)."""
    if mods.empty:
        for c in ("category", "own_category", "rule", "own_rule"):
            mods[c] = pd.Series(dtype=object)
        mods["att_root"] = pd.Series(dtype=np.int64)
        return None
    parent = mods["parent"].to_numpy()
    cls_codes, cls_uniq = codes_of(mods["cls"])
    qual_codes, qual_uniq = codes_of(mods["qualname"])
    pcls_codes = take(cls_codes, parent, len(cls_uniq))  # the parent's class ("" at the top)
    pcls_uniq = np.append(cls_uniq, "")
    pos, sib, head = mods["position"].to_numpy(), mods["siblings"].to_numpy(), head_places(mods)
    # The rules run once per distinct (class, name, parent class, position, siblings, head).
    key, first = distinct_rows(cls_codes, qual_codes, pcls_codes, pos, sib, head)
    cases = zip(
        cls_uniq[cls_codes[first]].tolist(),
        qual_uniq[qual_codes[first]].tolist(),
        pcls_uniq[pcls_codes[first]].tolist(),
        pos[first].tolist(),
        sib[first].tolist(),
        head[first].tolist(),
    )
    matched = [taxonomy.match(*case) for case in cases]
    # Distinct matches, and per module the one it inherits (nearest labelled ancestor-or-self)
    # and its outermost attention ancestor-or-self, visited by start (parents start first).
    ids = {m: k for k, m in enumerate(dict.fromkeys(m for m in matched if m is not None))}
    own_id = np.array([ids[m] if m is not None else -1 for m in matched], dtype=np.int64)[key]
    cats = np.array([m[0] for m in ids] + ["Other", ""], dtype=object)
    rules_ = np.array([m[1] for m in ids] + ["none", ""], dtype=object)
    start = mods["start"].to_numpy()
    got = inherit(parent, start, own_id)
    rows = np.arange(len(mods), dtype=np.int64)
    is_att = np.append(cats[: len(ids)] == "@attention", False)[own_id]
    inherited = np.where(got >= 0, got, len(ids))
    own_code = np.where(own_id >= 0, own_id, len(ids) + 1)
    mods["category"] = str_column(cats, inherited)
    mods["rule"] = str_column(rules_, inherited)
    mods["own_category"] = str_column(cats, own_code)
    mods["own_rule"] = str_column(rules_, own_code)
    mods["att_root"] = inherit(parent, start, np.where(is_att, rows, -1), outermost=True)
    return Coded(inherited, cats), Coded(inherited, rules_)


def module_categories(
    linked: LinkedTrace,
    taxonomy: ModuleTaxonomy,
    kcat: pd.Categorical | None = None,
    mod_labels: tuple[Coded, Coded] | None = None,
) -> tuple[Coded, Coded]:
    """Paper module category (Table VI row) and the rule behind it, per activity, as codes
    (``mod_labels``: the module table's ``category`` / ``rule`` as :func:`label_modules`
    returns them; read from the table when not given).

    RoPE needs rotary evidence: a rotary module (by the module rules), an op under a rotary
    python frame (``rope_frame``), a rotary op, or a rotary kernel (kernel category RoPE)."""
    a, mods = linked.activities, linked.modules
    mid = a["module_id"].to_numpy()
    if mods.empty:
        zero = np.zeros(len(a), np.intp)
        cat, rule = Coded(zero, np.array(["Other"], object)), Coded(zero, np.array(["none"], object))
    elif mod_labels is None:
        cat, rule = Coded.taken(mods["category"], mid, "Other"), Coded.taken(mods["rule"], mid, "none")
    else:
        cat, rule = (
            Coded(take(x.codes, mid, len(x.values)), np.append(x.values, d))
            for x, d in zip(mod_labels, ("Other", "none"))
        )
    rotary = a["rope_frame"].to_numpy().copy()
    if kcat is not None:
        rotary |= np.asarray(kcat == "RoPE", dtype=bool)
    att = cat.is_("@attention")
    if att.any():
        cat, rule = _with_parts(cat, rule, att, _attention_parts(a, mods, att, taxonomy, rotary[att]))
    rope = rotary & cat.is_("Other")
    cat, rule = cat.where(rope, "RoPE"), rule.where(rope, "rope-frame")
    head = cat.is_("Other") & head_ops(a, mods, taxonomy.head_gemm)
    cat, rule = cat.where(head, "Linear"), rule.where(head, "head-op")
    compiled = cat.is_("Other") & _in_compiled_region(a, taxonomy)
    return cat.where(compiled, "Compiled region"), rule.where(compiled, "compiled-region")


def _with_parts(cat: Coded, rule: Coded, att: np.ndarray, part: np.ndarray) -> tuple[Coded, Coded]:
    """The rows ``att`` take their attention part (``part``, one str per such row: a category,
    or ``<category>|<how>``) as category and ``<rule> attention:<category>[:<how>]`` as rule
    (each distinct rule and part joined once)."""
    p_codes, p_tags = pd.factorize(part)
    p_uniq = np.array([str(x).partition("|")[0] for x in p_tags], dtype=object)
    c = cat.codes.copy()
    c[att] = len(cat.values) + p_codes
    r_att = rule.codes[att]
    key, first = distinct_rows(r_att, p_codes)
    joined = [
        f"{rule.values[r]} attention:{p_tags[p].replace('|', ':')}"
        for r, p in zip(r_att[first], p_codes[first])
    ]
    r = rule.codes.copy()
    r[att] = len(rule.values) + key
    return (
        Coded(c, np.concatenate([cat.values, p_uniq])),
        Coded(r, np.concatenate([rule.values, np.array(joined, dtype=object)])),
    )


def _in_compiled_region(a: pd.DataFrame, taxonomy: ModuleTaxonomy) -> np.ndarray:
    """Activities launched inside a torch.compile region (its outermost or launching op is
    ``Torch-Compiled Region``, ``CompiledFunction[Backward]``, ...)."""
    return _matches(a["top_op"], taxonomy.compiled, full=True) | _matches(
        a["op"], taxonomy.compiled, full=True
    )


def _attention_parts(
    a: pd.DataFrame, mods: pd.DataFrame, att: np.ndarray, taxonomy: ModuleTaxonomy, rotary: np.ndarray
) -> np.ndarray:
    """Category of activities inside an attention module: the first matmul is Bmm0, the ops
    between the two matmuls Softmax, the second Bmm1; a fused attention op is Attention; rotary
    work (``rotary``, or a rotary op) is RoPE; everything else (q/k/v views and transposes,
    KV-cache writes, the output's reshape) is the block's glue, Attention other. Ops of child
    modules with no category of their own (nn.Softmax, nn.Dropout) are placed the same way."""
    mid = a["module_id"].to_numpy()
    # Times relative to an origin: comparisons below go through float64.
    top_ts = a["top_op_ts"].to_numpy()[att]
    origin = top_ts[top_ts >= 0].min() if (top_ts >= 0).any() else 0
    root = mods["att_root"].to_numpy()[mid[att]]
    block = np.where(root >= 0, root, mid[att])  # the outermost attention module
    ts_rel = np.where(top_ts >= 0, top_ts - origin, -1)
    top_id = a["top_op_id"].to_numpy()[att]
    fused = _matches(a["top_op"], taxonomy.fused_attention, full=True)[att]
    is_bmm = _matches(a["top_op"], taxonomy.bmm, full=True)[att] & ~fused
    b0, b1 = _first_two_matmuls(block, ts_rel, top_id, is_bmm)
    ts = ts_rel.astype("float64")
    out = np.full(len(ts), "Attention other", dtype=object)
    out[~np.isnan(b0) & (ts > b0) & (np.isnan(b1) | (ts < b1))] = "Softmax"
    out[ts == b0] = "Bmm0"
    out[ts == b1] = "Bmm1"
    out[top_id < 0] = "Attention other"
    rotary_op = (
        _matches(a["top_op"], taxonomy.rope, full=True) | _matches(a["op"], taxonomy.rope, full=True)
    )[att]
    out[(rotary | rotary_op) & ~fused] = "RoPE"
    out[fused] = "Attention"
    proj = _matches(a["top_op"], taxonomy.projection, full=True)[att] & ~fused & ~is_bmm & (top_id >= 0)
    out[proj] = projection_parts(block, ts, proj, (ts == b0) | fused)
    inside, part = composite_parts(a, np.flatnonzero(att), taxonomy)  # one op, a whole block
    out[inside] = part[inside]
    return out


def _first_two_matmuls(
    block: np.ndarray, ts: np.ndarray, top_id: np.ndarray, is_bmm: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, as float64 (NaN: none): when its block's first and second distinct matmul ops
    (``is_bmm`` rows, one per ``top_id``) start, in order of start."""
    rows = np.flatnonzero(is_bmm)
    rows = rows[np.sort(np.unique(top_id[rows], return_index=True)[1])]  # first row of each op
    rows = rows[np.lexsort((ts[rows], block[rows]))]
    head = np.ones(len(rows), bool)
    head[1:] = block[rows][1:] != block[rows][:-1]
    second = np.zeros(len(rows), bool)
    second[1:] = head[:-1] & ~head[1:]
    out = []
    for nth in (head, second):
        keys, vals = block[rows][nth], ts[rows][nth].astype("float64")
        at = np.searchsorted(keys, block)
        found = at < len(keys)
        found[found] = keys[at[found]] == block[found]
        out.append(np.where(found, vals[np.minimum(at, len(keys) - 1)] if len(keys) else np.nan, np.nan))
    return out[0], out[1]


#: The timeline blocks, in the order of their codes (:func:`blocks`).
