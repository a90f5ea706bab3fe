"""Kernel names read as C++ signatures, in time linear in the name's length whatever its nesting.

Kernel names come from strangers' traces: templated PyTorch, fbgemm or CUTLASS signatures of
300-1,500 characters, and hostile ones nested 50,000 deep. Every reading here visits each
character a bounded number of times (a stack of bracket positions, never a rescan per level):

* :func:`head`: the kernel's own name, template arguments and parameter lists removed and the
  return type dropped (``void at::native::reduce_kernel<512, 1, Op<..>>(..)`` ->
  ``at::native::reduce_kernel``): what the kernel rules match besides the full name;
* :func:`short_name`: the display form people read (terminal, HTML, Markdown), of a mangled
  name its readable part first (:mod:`tracekit.pipeline.demangle`): no return
  type, argument list or namespaces, the template arguments reduced to the one named type that
  says most (``vectorized_elementwise_kernel<CUDAFunctor_add>``,
  ``reduce_kernel<MeanOps>``, ``elementwise_kernel<direct_copy_kernel_cuda>``), skipping the
  wrappers every such kernel has (``ReduceOp``, ``gpu_kernel_impl``, ``Array``...) and, when
  something else is named, the element types.

Neither bounds the length: a renderer shortens first and then bounds
(:func:`tracekit.render.common.display_name`), so a long name is never cut before it is read.
"""

from __future__ import annotations

import re

from . import demangle

#: Words of template arguments that never name what a kernel does.
_PLAIN = {
    "int",
    "unsigned",
    "long",
    "float",
    "double",
    "char",
    "bool",
    "short",
    "void",
    "signed",
    "const",
    "half",
    "true",
    "false",
    "at",
    "c10",
    "std",
    "detail",
    "native",
    "lambda",
    "operator",
}
#: Templates that wrap the interesting argument: the name inside them is shown instead.
_WRAPPERS = {
    "ReduceOp",
    "func_wrapper_t",
    "gpu_kernel_impl",
    "gpu_kernel_impl_nocast",
    "gpu_index_kernel",
    "AUnaryFunctor",
    "BUnaryFunctor",
    "BinaryFunctor",
    "UnaryFunctor",
    "OpaqueType",
    "Array",
    "GenericPackedTensorAccessor",
    "PackedTensorAccessor",
    "PackedTensorAccessor32",
    "PackedTensorAccessor64",
    "RestrictPtrTraits",
    "DefaultPtrTraits",
    "TensorIteratorBase",
    "TensorIterator",
    "TrivialOffsetCalculator",
    "OffsetCalculator",
    "LoadWithoutCast",
    "StoreWithoutCast",
    "LoadWithCast",
    "StoreWithCast",
    "binary_internal",
    "templates",
    "cuda",
}
#: Element types: shown only when the arguments name nothing else.
_DTYPES = re.compile(
    r"^(?:BFloat16|Half|bfloat16|half2|float2|float4|__half|__nv_bfloat16|nv_bfloat16|__hip_bfloat16"
    r"|Float8_\w+|__nv_fp8\w*|complex|u?int\d+_t|size_t|ptrdiff_t)$"
)
_WORD = re.compile(r"[A-Za-z_][\w:]*")
_BRACKET = re.compile(r"[<>()]")
#: An enum value cast to its type, ``(vllm::Fp8KVCacheDataType)0``: a value, not a name.
_CAST = re.compile(r"\([\w:]+\)-?\d+")


def _spans(s: str) -> list[tuple[int, int]]:
    """Every matched ``<...>`` and ``(...)`` of ``s`` as (open, close) positions, each kind
    matched with a stack of its own (a ``>`` of ``->`` or a lone ``<`` stays unmatched)."""
    stacks: dict[str, list[int]] = {"<": [], "(": []}
    pairs = []
    for m in _BRACKET.finditer(s):
        ch, i = m.group(), m.start()
        if ch in stacks:
            stacks[ch].append(i)
        else:
            opened = stacks["<" if ch == ">" else "("]
            if opened:
                pairs.append((opened.pop(), i))
    return pairs


def outside_brackets(s: str) -> str:
    """``s`` without every character inside a matched pair of brackets (the pair included)."""
    pairs = _spans(s)
    if not pairs:
        return s
    out, pos = [], 0
    for lo, hi in sorted(pairs):
        if lo > pos:
            out.append(s[pos:lo])
        pos = max(pos, hi + 1)
    out.append(s[pos:])
    return "".join(out)


def head(name: str) -> str:
    """A kernel's own name: template arguments and parameter lists removed, return type
    dropped. Names without brackets (mangled, cuBLAS, Triton) are their own head."""
    if "<" not in name and "(" not in name:
        parts = name.split()
        return parts[-1] if parts else name
    parts = outside_brackets(name).split()
    return parts[-1] if parts else name


def _outline(s: str) -> tuple[str, list[str]]:
    """``s`` with each outermost ``<...>`` replaced by ``\\x00i\\x00`` and the texts inside."""
    out: list[str] = []
    inner: list[str] = []
    depth, last, start = 0, 0, 0
    for m in re.finditer(r"[<>]", s):
        i = m.start()
        if m.group() == "<":
            depth += 1
            if depth == 1:
                out.append(s[last:i])
                start = i + 1
        elif depth:
            depth -= 1
            if depth == 0:
                out.append(f"\x00{len(inner)}\x00")
                inner.append(s[start:i])
                last = i + 1
    if not depth:  # an unclosed template's text is left out
        out.append(s[last:])
    return "".join(out), inner


def _cut_arguments(s: str) -> str:
    """``s`` without its trailing ``(...)`` argument list."""
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        ch = s[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                return s[:i].rstrip()
    return s


def _named(inner: str) -> str | None:
    """The template argument to show: the first named type that is neither a wrapper nor an
    element type, else the first element type."""
    dtype = None
    for w in _WORD.findall(_CAST.sub("", inner)):
        w = w.rsplit("::", 1)[-1]
        if len(w) <= 2 or w.lower() in _PLAIN or w in _WRAPPERS:
            continue
        if _DTYPES.match(w):
            dtype = dtype or w
            continue
        return w
    return dtype


def short_name(name: str) -> str:
    """A kernel name for display (see the module docstring); names that are not C++
    signatures (``Memcpy DtoD (Device -> Device)``, ``nvjet_...``) are kept, a C signature
    ``name(args)`` loses its arguments. Not bounded: see :func:`tracekit.render.common.display_name`."""
    s = str(name).strip()
    if s.startswith("_Z"):  # Itanium-mangled (AMD's aiter, ck_tile): its readable part
        s = demangle.readable(s) or s
    if "<" in s or "::" in s:
        s = s.replace("(anonymous namespace)::", "")
        s = s[5:].lstrip() if s.startswith("void ") else s
        outer, inner = _outline(s)
        outer = _cut_arguments(outer)
        words = outer.split()
        last = words[-1] if words else outer
        last = last.rsplit("::", 1)[-1] or last
        m = re.search(r"\x00(\d+)\x00", last)
        base = re.sub(r"\x00\d+\x00", "", last)
        named = _named(inner[int(m.group(1))]) if m else None
        return f"{base}<{named}>" if named and base else base or s
    if re.match(r"^[\w.$]+\(", s):  # a C signature: name(args)
        return _cut_arguments(s)
    return s
