"""Rules as data: module categories (Table VI) and kernel categories (Table X).

The rules live in ``tracekit/data/modules.toml`` and ``tracekit/data/kernels.toml``; a user file
passed with ``--taxonomy`` / ``--kernel-rules`` is read the same way and its rules are tried
before the built-in ones.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

from ..errors import TraceError
from .names import head

#: Table VI rows in the paper's order (Attention stands for fused attention kernels; Attention
#: other is the attention block's glue: q/k/v views and transposes, KV-cache writes, ...).
MODULE_CATEGORIES = [
    "Embedding",
    "QKV",
    "RoPE",
    "Bmm0",
    "Softmax",
    "Bmm1",
    "Attention",
    "Attention other",
    "Output",
    "MLP",
    "MoE routing",
    "RMSNorm",
    "Linear",
    "Compiled region",
]
#: Table X compute categories: the paper's first, in its order, then the ones that keep Other
#: small on any model (convolution, normalization other than RMSNorm, ...), Other last.
KERNEL_CATEGORIES = [
    "Element-wise",
    "RoPE",
    "Triton",
    "GEMM",
    "RMSNorm",
    "Attention",
    "Convolution",
    "Normalization",
    "Reduction",
    "Data movement",
    "Quantization",
    "MoE routing",
    "Embedding",
    "Other",
]
#: Communication categories: every collective (kernels.toml's ``collectives``), so that a
#: communication kernel's category is its collective, the one label the comm table gives it
#: too (the paper's AllReduce / AllGather, all-to-all of expert parallelism, ...).
COMM_CATEGORIES = [
    "AllReduce",
    "AllGather",
    "ReduceScatter",
    "AllToAll",
    "Broadcast",
    "Reduce",
    "SendRecv",
    "Other",
]


def _rx_required(pattern: str, flags: int = 0) -> re.Pattern:
    """:func:`_rx` for a pattern the rules file must give (never None)."""
    rx = _rx(pattern, flags)
    if rx is None:
        raise TypeError("a required pattern is missing")
    return rx


def _rx(pattern: str | None, flags: int = 0) -> re.Pattern | None:
    """Compile a rule's pattern. The built-in rules' patterns use Python's ``re``; every other
    pattern (a user's ``--taxonomy`` / ``--kernel-rules`` file) is compiled with RE2, whose
    matching time is linear in the text, so no rule can hang on a name (``(a+)+$``)."""
    if pattern is None:
        return None
    if not isinstance(pattern, str):
        raise TypeError(f"a pattern must be a string, not {type(pattern).__name__}")
    if pattern in _builtin_patterns():
        return cast(re.Pattern, _OnFirstUse(pattern, flags))
    return linear(pattern, flags)


class _OnFirstUse:
    """A trusted pattern (a string of the packaged rule files), compiled by ``re`` when it is
    first used: a trace uses 40-65 % of the ~80 built-in patterns, and Python's compiler (pure
    Python) cost more instructions than anything else a fresh process does once, before its
    first table. Every packaged string compiles (tests/test_labels.py), so a rule can fail no
    later than before. After the compile its methods are the compiled pattern's own (set on
    the instance), so matching costs what it did."""

    def __init__(self, pattern: str, flags: int) -> None:
        self.pattern, self.flags = pattern, flags

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        rx = re.compile(self.pattern, self.flags)
        for method in ("search", "match", "fullmatch", "findall", "finditer", "sub", "split"):
            setattr(self, method, getattr(rx, method))
        return getattr(rx, name)


@lru_cache(maxsize=2)
def _packaged(name: str) -> dict:
    """The packaged rules file ``name``, parsed once a process (tomllib is pure Python); its
    readers only read it."""
    return tomllib.loads(resources.files("tracekit.data").joinpath(name).read_text())


@lru_cache(maxsize=1)
def _builtin_patterns() -> frozenset[str]:
    """Every string of the packaged rule files (their patterns are trusted)."""
    found: set[str] = set()

    def walk(v) -> None:
        if isinstance(v, str):
            found.add(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for name in ("modules.toml", "kernels.toml"):
        walk(_packaged(name))
    return frozenset(found)


def linear(pattern: str, flags: int = 0):
    """``pattern`` compiled by RE2 (linear time; same syntax as ``re`` for what rules use:
    ``(?i)``/``(?-i:...)`` groups, classes, anchors; no lookaround or backreferences), with
    ``re.IGNORECASE`` honoured. Without google-re2 installed, Python's ``re`` is used."""
    try:
        import re2
    except ImportError:
        return re.compile(pattern, flags)
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not flags & re.IGNORECASE
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        msg = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise re.error(
            f"pattern {pattern[:80]!r} cannot run in linear time or is invalid "
            f"({msg}; lookaround and backreferences are not supported)"
        ) from None


@dataclass
class ModuleRule:
    category: str
    cls: re.Pattern | None = None
    name: re.Pattern | None = None
    parent: re.Pattern | None = None
    by_position: dict[int, list[str]] = field(default_factory=dict)
    rule_id: str = ""
    head: bool = False  # ``head = true``: a module in the head place only (pipeline/heads.py)
    why: str = ""  # what the rule says, for ``tracekit explain``

    def match(self, cls: str, name: str, parent: str, position: int, siblings: int, head=False) -> str | None:
        if self.head and not head:
            return None
        if self.cls is not None and not self.cls.fullmatch(cls):
            return None
        if self.name is not None and not (name and self.name.fullmatch(name)):
            return None
        if self.parent is not None and not self.parent.fullmatch(parent):
            return None
        if self.by_position:
            cats = self.by_position.get(siblings)
            if cats is None or not 0 <= position < len(cats):
                return None
            return cats[position]
        return self.category


@dataclass
class ModuleTaxonomy:
    rules: list[ModuleRule]
    decoder_layer: re.Pattern
    fused_attention: re.Pattern
    bmm: re.Pattern
    rope: re.Pattern
    compiled: re.Pattern = re.compile(r"(?!)")
    #: One op holding a whole attention block (nn.MultiheadAttention's fast path).
    composite: re.Pattern = re.compile(r"(?!)")
    #: Child ops of such a composite op, by what they compute.
    composite_gemm: re.Pattern = re.compile(r"(?!)")
    composite_qkv: re.Pattern = re.compile(r"(?!)")
    composite_softmax: re.Pattern = re.compile(r"(?!)")
    projection: re.Pattern = re.compile(r"(?!)")  # an attention module's own GEMM op (MHA's F.linear)
    head_gemm: re.Pattern = re.compile(r"(?!)")  # a model's own output projection (pipeline/heads.py)

    def category(self, cls: str, name: str, parent: str, position: int, siblings: int) -> str | None:
        """Category of one module by the first matching rule, or None."""
        hit = self.match(cls, name, parent, position, siblings)
        return None if hit is None else hit[0]

    def match(self, cls: str, name: str, parent: str, position: int, siblings: int, head=False):
        """(category, rule id) of one module by the first matching rule, or None (``head``:
        the module is in the head place, :func:`tracekit.pipeline.heads.head_places`)."""
        for rule in self.rules:
            cat = rule.match(cls, name, parent, position, siblings, head)
            if cat is not None:
                return cat, rule.rule_id
        return None


@dataclass
class KernelRule:
    category: str
    kernel: re.Pattern | None
    op: re.Pattern | None
    rule_id: str = ""
    head: re.Pattern | None = None


def kernel_head(name: str) -> str:
    """A kernel's own name: template arguments and parameter lists removed, return type
    dropped (``void at::native::reduce_kernel<512, 1, Op<..>>(..)`` -> ``at::native::reduce_kernel``),
    in time linear in the name's length whatever its nesting (:func:`tracekit.pipeline.names.head`).
    Names without brackets (mangled, cuBLAS, Triton) are their own head."""
    return head(name)


#: Most distinct kernel cases :attr:`KernelRules.memo` keeps between files (~20 MB at most).
MEMO_CASES = 1 << 16


@dataclass
class KernelRules:
    rules: list[KernelRule]
    comm_kernel: re.Pattern
    comm_op: re.Pattern
    collectives: list[tuple[str, re.Pattern]]
    #: What :mod:`tracekit.pipeline.labels` derived from these rules per distinct activity case, kept
    #: with them: the ranks one process analyses share their kernel names. Read it through
    #: :meth:`remembered`, which bounds it.
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    def remembered(self) -> dict:
        """:attr:`memo`, emptied first when it holds more than :data:`MEMO_CASES` cases: a
        long-lived process (a Dask worker, a notebook) analysing many unrelated traces, or a
        trace with millions of distinct kernel names, keeps at most that many between files."""
        if len(self.memo) > MEMO_CASES:
            self.memo.clear()
        return self.memo

    def compute_category(self, kernel: str, op: str) -> str:
        return self.classify(kernel, op)[0]

    def classify(self, kernel: str, op: str) -> tuple[str, str]:
        """(category, rule id) of a compute kernel: the first rule whose patterns all match."""
        head = kernel_head(kernel)
        for r in self.rules:
            if r.kernel is not None and not r.kernel.search(kernel):
                continue
            if r.head is not None and not r.head.search(head):
                continue
            if r.op is not None and not r.op.search(op):
                continue
            return r.category, r.rule_id
        return "Other", "none"

    def collective(self, *texts: str) -> str:
        """Collective of the first text that names one (kernel name, then CPU-side names)."""
        return self.collective_source(*(("", t) for t in texts))[0]

    def collective_of(self, kernel: str, cpu: str = "", op: str = "") -> tuple[str, str]:
        """(collective, where it was read) of a communication kernel. The kernel name decides,
        except where it names none (``ncclDevKernel_Generic``: the CPU side decides) or only
        says SendRecv while the CPU side says all-to-all (which NCCL runs as send/recv)."""
        c, src = self.collective_source(("kernel", kernel))
        if c in ("SendRecv", "Other"):
            c2, src2 = self.collective_source(("cpu", cpu), ("op", op))
            if c == "Other" or c2 == "AllToAll":
                return c2, src2
        return c, src

    def collective_source(self, *texts: tuple[str, str]) -> tuple[str, str]:
        """(collective, which text named it) over (label, text) pairs, in order."""
        for where, text in texts:
            if not text:
                continue
            for name, rx in self.collectives:
                if rx.search(text):
                    return name, where
        return "Other", "none"


def _load_toml(path: Path | None, builtin: str) -> tuple[dict, dict]:
    base = _packaged(builtin)
    user: dict = {}
    if path is not None:
        if path.exists() and not path.is_file():  # a FIFO would block: regular files only
            raise TraceError(path, "not a regular file; refused")
        try:
            user = tomllib.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError) as e:
            raise TraceError(path, f"cannot read rules file ({e.__class__.__name__})") from None
        except tomllib.TOMLDecodeError as e:
            raise TraceError(path, f"not valid TOML ({e})") from None
    return base, user


def _source(path: str | None) -> str:
    """How rule ids name a user's rules file."""
    return f"user:{Path(path).name}" if path else ""


def _module_rule(d: dict, source: str, rule_id: str) -> ModuleRule:
    if "category" not in d:
        raise TraceError(source, "every [[rule]] needs a category")
    try:
        return ModuleRule(
            category=d["category"],
            cls=_rx(d.get("class")),
            name=_rx(d.get("name")),
            parent=_rx(d.get("parent")),
            by_position={int(k): list(v) for k, v in d.get("by_position", {}).items()},
            rule_id=rule_id,
            head=bool(d.get("head", False)),
            why=str(d.get("why", "")),
        )
    except (re.error, ValueError, TypeError) as e:
        raise TraceError(source, f"bad rule {d!r}: {e}") from None


#: Optional keys of ``[attention]``, each a ModuleTaxonomy field of the same name.
_ATTENTION_KEYS = ("composite", "composite_gemm", "composite_qkv", "composite_softmax", "projection")


@lru_cache(maxsize=8)
def module_taxonomy(path: str | None = None) -> ModuleTaxonomy:
    """The built-in module taxonomy, with the rules of ``path`` (a TOML file) tried first."""
    base, user = _load_toml(Path(path) if path else None, "modules.toml")
    rules = [
        _module_rule(r, path or "modules.toml", f"{_source(path)}#{r.get('category')}:{i}")
        for i, r in enumerate(user.get("rule", []), 1)
    ]
    rules += [
        _module_rule(r, "modules.toml", f"modules.toml#{r.get('category')}:{i}")
        for i, r in enumerate(base["rule"], 1)
    ]
    structure = {**base["structure"], **user.get("structure", {})}
    attention = {**base["attention"], **user.get("attention", {})}
    try:
        return ModuleTaxonomy(
            rules=rules,
            decoder_layer=_rx_required(structure["decoder_layer"]),
            fused_attention=_rx_required(attention["fused"]),
            bmm=_rx_required(attention["bmm"]),
            rope=_rx_required(attention["rope"], re.IGNORECASE),
            compiled=_rx_required(structure["compiled"]) if "compiled" in structure else re.compile(r"(?!)"),
            **{key: _rx_required(attention[key]) for key in _ATTENTION_KEYS if key in attention},
            head_gemm=_rx_required(structure.get("head_gemm", "(?!)")),
        )
    except (re.error, TypeError) as e:
        raise TraceError(path or "modules.toml", f"bad module rules: {e}") from None


@lru_cache(maxsize=8)
def kernel_rules(path: str | None = None) -> KernelRules:
    """The built-in kernel rules, with the rules of ``path`` (a TOML file) tried first."""
    base, user = _load_toml(Path(path) if path else None, "kernels.toml")
    flags = re.IGNORECASE
    try:
        tagged = [(r, f"{_source(path)}#{r['category']}:{i}") for i, r in enumerate(user.get("rule", []), 1)]
        tagged += [(r, f"kernels.toml#{r['category']}:{i}") for i, r in enumerate(base["rule"], 1)]
        rules = [
            KernelRule(
                r["category"],
                _rx(r.get("kernel"), flags),
                _rx(r.get("op"), flags),
                rid,
                _rx(r.get("head"), flags),
            )
            for r, rid in tagged
        ]
        comm = {**base["comm"], **user.get("comm", {})}
        return KernelRules(
            rules=rules,
            comm_kernel=_rx_required(comm["kernel"], flags),
            comm_op=_rx_required(comm["op"], flags),
            collectives=[(n, _rx_required(p, flags)) for n, p in comm["collectives"]],
        )
    except (KeyError, re.error, TypeError, ValueError) as e:
        raise TraceError(path or "kernels.toml", f"bad kernel rules: {e}") from None
