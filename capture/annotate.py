"""tracekit's own profiler ranges around phases and module forwards (names: tracekit.annotations).

``annotate_modules`` registers forward pre/post hooks that open and close a
``tracekit.module:<ClassName>:<qualified.name>`` range around every submodule's forward, so the
trace names each module unambiguously without Python stacks. ``phase`` is a context manager for
``tracekit.phase:<phase>`` ranges. ``annotated_call`` wraps a plain callable (LightLLM's layer
functions are not nn.Modules; transformers' ``apply_rotary_pos_emb``) in a module range.
"""

from __future__ import annotations

import contextlib
import functools

from tracekit.annotations import module_range, phase_range


def _record_function(name: str):
    from torch.profiler import record_function

    return record_function(name)


@contextlib.contextmanager
def phase(name: str):
    """A ``tracekit.phase:<name>`` range around the block."""
    with _record_function(phase_range(name)):
        yield


def strip_prefixes(qualified_name: str, prefixes: tuple[str, ...]) -> str:
    for prefix in prefixes:
        if qualified_name.startswith(prefix):
            return qualified_name[len(prefix) :]
    return qualified_name


class ModuleAnnotator:
    """Hooks that put a named range around each submodule's forward; ``remove()`` undoes them.

    The root module is not annotated (the phase range covers it). ``strip`` removes wrapper
    prefixes (PEFT's ``base_model.model.``) so names match the plain transformers model.
    Ranges are kept on a per-module stack, so a module re-entered while running (activation
    recomputation runs forwards again inside backward) closes the range it opened.
    """

    def __init__(self, model, strip: tuple[str, ...] = ()) -> None:
        self.names: dict[int, str] = {}
        self._open: dict[int, list] = {}
        self._handles: list = []
        for qualified, module in model.named_modules():
            if not qualified:
                continue
            qualified = strip_prefixes(qualified, strip)
            name = module_range(type(module).__name__, qualified)
            self.names[id(module)] = name
            self._handles.append(module.register_forward_pre_hook(self._enter, prepend=True))
            self._handles.append(module.register_forward_hook(self._exit, always_call=True))
        self._patched = _annotate_rotary(model)

    def _enter(self, module, args):
        rf = _record_function(self.names[id(module)])
        rf.__enter__()
        self._open.setdefault(id(module), []).append(rf)

    def _exit(self, module, args, output):
        stack = self._open.get(id(module))
        if stack:
            stack.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for mod, fn in self._patched:
            setattr(mod, ROTARY_FUNCTION, fn)
        self._patched.clear()


#: The rotary embedding is applied inside attention by a plain function, not a module.
ROTARY_FUNCTION = "apply_rotary_pos_emb"


def _annotate_rotary(model) -> list:
    """Wrap the modeling modules' ``apply_rotary_pos_emb`` in a module range (class
    ``ApplyRotaryPosEmb``), so RoPE is recognisable without Python stacks. Returns
    ``[(python module, original function)]`` to undo it."""
    import sys

    patched = []
    for name in {type(m).__module__ for m in model.modules()}:
        mod = sys.modules.get(name)
        fn = getattr(mod, ROTARY_FUNCTION, None) if mod is not None else None
        if callable(fn) and not hasattr(fn, "__tracekit_range__"):
            setattr(mod, ROTARY_FUNCTION, annotated_call(fn, "ApplyRotaryPosEmb", ROTARY_FUNCTION))
            patched.append((mod, fn))
    return patched


def annotate_modules(model, strip: tuple[str, ...] = ()) -> ModuleAnnotator:
    return ModuleAnnotator(model, strip)


def annotated_call(fn, class_name: str, qualified_name: str):
    """``fn`` wrapped so every call runs inside a ``tracekit.module`` range."""
    name = module_range(class_name, qualified_name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _record_function(name):
            return fn(*args, **kwargs)

    wrapper.__tracekit_range__ = name
    return wrapper
