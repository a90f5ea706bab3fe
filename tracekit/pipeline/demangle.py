"""The readable part of an Itanium-mangled kernel name (``_ZN5aiter24add_rmsnorm_quant_kernelI...``),
for display only, in pure Python and in time linear in the name's length.

AMD's libraries (aiter, composable_kernel, ck_tile) and some CUTLASS builds leave kernel names
mangled in the trace. A full demangler (``c++filt``, ``cxxfilt``) is not on every machine, and
using it where it is would make the same trace print differently on two machines; so tracekit
reads only the common case itself, the same everywhere:

* the nested name ``_ZN <len><id> ... E`` (or one plain ``_Z <len><id>``): its components joined by
  ``::``, ``_GLOBAL__N_1`` read as ``(anonymous namespace)``, ``St`` as ``std``;
* whether template arguments follow (``I ... E``), and the identifiers named inside them (each
  ``<len><id>`` after a ``N``, ``I``, ``E``, ``_``, ``K``, ``P``, ``R`` or ``Z``: the places a
  source name starts; of a nested name, its last component), from which
  :func:`tracekit.pipeline.names.short_name` picks the one to show, as for a demangled name.

Everything else (operators, constructors, substitutions, builtin types, function parameters)
is left unread; a name that is not of this form gives None and is shown as it is.
"""

from __future__ import annotations

import re

#: ``<len><identifier>`` where a source name can start inside template arguments.
_SOURCE = re.compile(r"(?<=[NIE_KPRZ])(\d+)")


def _source_name(s: str, i: int) -> tuple[str, int] | None:
    """The ``<len><id>`` at ``s[i:]`` and the position after it, or None."""
    j = i
    while j < len(s) and s[j].isdigit():
        j += 1
    if j == i or s[i] == "0":
        return None
    n = int(s[i:j])
    ident = s[j : j + n]
    if len(ident) != n or not re.fullmatch(r"[A-Za-z_$][\w$.]*", ident):
        return None
    return ident, j + n


def nested_name(name: str) -> tuple[list[str], str] | None:
    """``(components, template text)`` of a mangled name: ``_ZN5aiter3fooIfEEvv`` ->
    ``(["aiter", "foo"], "fEEvv")``; the template text is "" when no ``I`` follows the name."""
    if not name.startswith("_Z") or len(name) > 100_000:
        return None
    i, nested = (3, True) if name.startswith("_ZN") else (2, False)
    while nested and i < len(name) and name[i] in "rVKO":  # cv- and ref-qualifiers of a method
        i += 1
    parts: list[str] = []
    while i < len(name):
        if name.startswith("St", i) and not parts:
            parts.append("std")
            i += 2
            continue
        got = _source_name(name, i)
        if got is None:
            break
        ident, i = got
        parts.append("(anonymous namespace)" if ident.startswith("_GLOBAL__N") else ident)
        if not nested:
            break
    if not parts:
        return None
    return parts, name[i + 1 :] if name[i : i + 1] == "I" else ""


def template_words(text: str) -> list[str]:
    """The identifiers named in mangled template arguments, in order; of a nested name
    (``4conv6kernel23ImplicitGemmConvolution``: one name right after another) only the last."""
    out: list[str] = []
    end = -1
    for m in _SOURCE.finditer(text):
        if m.start() < end:
            continue
        got = _source_name(text, m.start())
        while got is not None:  # a nested name's components follow one another
            word, end = got
            got = _source_name(text, end)
        if end > m.start():
            out.append(word)
    return out


def readable(name: str) -> str | None:
    """``ns::kernel<words named in its template arguments>`` of a mangled name, else None."""
    got = nested_name(name)
    if got is None:
        return None
    parts, args = got
    base = "::".join(parts)
    return f"{base}<{', '.join(template_words(args))}>" if args else base
