"""The methods ``tracekit capture sweep`` compares, and how each maps to a training capture.

A method is one name or several joined by ``+`` (``zero3+offload+recompute``):

=============  ===================================================  ========
name           training capture                                     paper
=============  ===================================================  ========
``naive``      data parallel, no memory saving (alone only)         Naive
``zero2``      ``--zero 2``                                         Z2
``zero3``      ``--zero 3``                                         Z3
``offload``    ``--offload`` (with ``--zero 2`` unless zero3 is     O
               named: the paper's Z2+O offloads the optimizer
               state, its Z3+O also the parameters)
``recompute``  ``--recompute``                                      R
``flash``      ``--attention flash``                                F
``lora``       ``--lora``                                           L
``qlora``      ``--qlora``                                          QL
=============  ===================================================  ========

The paper's label of a method (``L+F+R+Z2+O``) puts the parts in the paper's order: fine-tuning,
FlashAttention, recomputation, ZeRO, offloading.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import CaptureError
from .runs import Train

PARTS = ("naive", "zero2", "zero3", "offload", "recompute", "flash", "lora", "qlora")
#: part -> the paper's notation, in the order the paper writes a combination.
PAPER = {
    "lora": "L",
    "qlora": "QL",
    "flash": "F",
    "recompute": "R",
    "zero2": "Z2",
    "zero3": "Z3",
    "offload": "O",
}
#: Parts that exclude each other.
EXCLUSIVE = (("zero2", "zero3"), ("lora", "qlora"))


@dataclass(frozen=True)
class Method:
    """One method of a sweep: its name as given and the capture it means."""

    name: str
    parts: frozenset[str]

    @property
    def label(self) -> str:
        """The paper's notation: ``Naive``, ``Z3+O``, ``L+F+R+Z2+O``."""
        shown = [PAPER[p] for p in PAPER if p in self.parts or (p == "zero2" and self.implied_zero2)]
        return "+".join(shown) or "Naive"

    @property
    def implied_zero2(self) -> bool:
        """``offload`` named without a ZeRO stage runs on ZeRO-2 (DeepSpeed offloads only under ZeRO)."""
        return "offload" in self.parts and not self.parts & {"zero2", "zero3"}

    @property
    def finetune(self) -> str | None:
        return "lora" if "lora" in self.parts else "qlora" if "qlora" in self.parts else None

    def train(self, base: Train) -> Train:
        """``base`` (sequence length, steps, ranks) with this method's options."""
        zero = 3 if "zero3" in self.parts else 2 if "zero2" in self.parts or self.implied_zero2 else 0
        return replace(
            base,
            zero=zero,
            offload="offload" in self.parts,
            recompute="recompute" in self.parts,
            finetune=self.finetune,
        )

    def attention(self, base: str) -> str:
        return "flash" if "flash" in self.parts else base

    def options(self) -> list[str]:
        """This method's options of ``tracekit capture train``."""
        t = self.train(Train())
        out = [f"--zero={t.zero}"] if t.zero else []
        out += ["--offload"] * t.offload + ["--recompute"] * t.recompute
        out += [f"--{t.finetune}"] if t.finetune else []
        return out + (["--attention=flash"] if "flash" in self.parts else [])


def parse_method(text: str) -> Method:
    parts = [p.strip().lower() for p in text.split("+")]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise CaptureError(f"--methods: unknown method {unknown[0]!r}; methods: {', '.join(PARTS)}")
    if "naive" in parts and len(parts) > 1:
        raise CaptureError(f"--methods: {text!r}: naive stands alone (it is the method without the others)")
    for a, b in EXCLUSIVE:
        if a in parts and b in parts:
            raise CaptureError(f"--methods: {text!r} names both {a} and {b}")
    names = frozenset(parts) - {"naive"}
    return Method(name="+".join(parts), parts=names)


def parse_methods(text: str) -> list[Method]:
    """The methods of ``--methods`` (comma-separated), each once, in the order given."""
    items = [m for m in (t.strip() for t in text.split(",")) if m]
    if not items:
        raise CaptureError("--methods names no method")
    out: list[Method] = []
    for item in items:
        m = parse_method(item)
        if m.parts not in {o.parts for o in out}:
            out.append(m)
    return out
