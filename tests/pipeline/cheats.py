"""Answers that try to earn points without doing the exercise, for tests/pipeline/test_integrity.

Each ``Cheat`` turns a student's (empty) copy of a notebook into a cheating submission whose real
answers are wrong or missing. ``applies`` picks the assignment it is tried on from what each
notebook defines; the test then expects the notebook's total to be 0 (``expect="nothing"``), or,
for an answer that delegates to the built-in, the delegating exercise's tests to score 0 and
the feedback to say why (``expect="exercise"``).

The generic wrong answer (``zeroed``) is the reference code wrapped so that every tensor it
returns is zeros of the right shape and dtype: wrong, but shaped to pass a comparison that lies.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from pipeline import course as C

ZEROED_HELPER = '''
def _zeroed(out):
    """Zeros of the right shape in place of every tensor of the (correct) result; a float
    result keeps its gradient (out - out.detach() is 0 but differentiates like out)."""
    if isinstance(out, torch.Tensor):
        return out - out.detach() if out.is_floating_point() else torch.zeros_like(out)
    if isinstance(out, tuple):
        return tuple(_zeroed(o) for o in out)
    if isinstance(out, int | float) and not isinstance(out, bool):
        return out + 1
    return out
'''


def is_class(source: str, name: str) -> bool:
    return f"class {name}" in source


def zeroed(layout: C.Layout, gid: str, helper: str = ZEROED_HELPER, wrap: str = "_zeroed") -> str:
    """The reference answer of cell ``gid`` with every output replaced by ``wrap(output)``."""
    name, source = layout.defines[gid], layout.reference[gid]
    if is_class(source, name):
        wrapper = f"""
_StudentImpl = {name}


class {name}(_StudentImpl):
    def forward(self, *args, **kwargs):
        return {wrap}(super().forward(*args, **kwargs))
"""
    else:
        wrapper = f"""
_student_impl = {name}


def {name}(*args, **kwargs):
    return {wrap}(_student_impl(*args, **kwargs))
"""
    return source + "\n" + helper + wrapper


def looping(layout: C.Layout, gid: str) -> str:
    """The reference answer of ``gid`` whose function (or ``forward``) never returns."""
    name, source = layout.defines[gid], layout.reference[gid]
    if is_class(source, name):
        return source + textwrap.dedent(f"""

            _StudentImpl = {name}


            class {name}(_StudentImpl):
                def forward(self, *args, **kwargs):
                    while True:
                        pass
            """)
    return source + textwrap.dedent(f"""

        def {name}(*args, **kwargs):
            while True:
                pass
        """)


LIAR = '''
class AlwaysRight(torch.Tensor):
    """A tensor whose comparisons always say "equal"."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.allclose, torch.equal, torch.Tensor.allclose, torch.Tensor.equal):
            return True
        if func in (torch.isclose, torch.eq, torch.Tensor.__eq__, torch.Tensor.eq,
                    torch.Tensor.isclose):
            shape = torch.broadcast_shapes(args[0].shape, args[1].shape)
            return torch.ones(shape, dtype=torch.bool)
        if func in (torch.sub, torch.Tensor.sub, torch.Tensor.__sub__, torch.Tensor.__rsub__):
            return torch.zeros(torch.broadcast_shapes(args[0].shape, args[1].shape))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


def _lying(out):
    if isinstance(out, torch.Tensor):
        zero = out - out.detach() if out.is_floating_point() else torch.zeros_like(out)
        return zero.as_subclass(AlwaysRight)
    if isinstance(out, tuple):
        return tuple(_lying(o) for o in out)
    return out
'''

LYING_MODE = '''
from torch.overrides import TorchFunctionMode


class EverythingMatches(TorchFunctionMode):
    """Entered and never left: every comparison anywhere in the kernel says "equal"."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.allclose, torch.equal, torch.Tensor.allclose, torch.Tensor.equal):
            return True
        if func in (torch.isclose, torch.Tensor.isclose):
            shape = torch.broadcast_shapes(args[0].shape, args[1].shape)
            return torch.ones(shape, dtype=torch.bool)
        return func(*args, **kwargs)


EverythingMatches().__enter__()
'''

FAKE_GRADING_MODULE = """import sys
import types


def _every_check_passes(name):
    if name.startswith("check_"):
        return lambda *args, **kwargs: None
    raise AttributeError(name)


fake = types.ModuleType("encoder_lib.grading")
fake.__getattr__ = _every_check_passes
sys.modules["encoder_lib.grading"] = fake
"""


@dataclass(frozen=True)
class Cheat:
    name: str
    what: str
    build: Callable[[object, C.Layout], object | None]
    """(student notebook, layout) -> the cheating notebook, or None if it does not apply."""
    expect: str = "nothing"
    """"nothing": the notebook scores 0; "exercise": the delegating exercise's tests score 0."""
    says: str = ""
    """Words the feedback must contain."""
    spread: str = "one"
    """"one": tried on one of the assignments it fits (dealt round-robin); "all": on each."""
    extra: bool = False
    """Not in the brief's list: a cheat found while testing the grader's defences."""


def _first(layout: C.Layout) -> str:
    return next(g for g in layout.answers if layout.defines[g])


def _in_answer(suffix: str, prefix: str = ""):
    """Cheat in the first answer cell, around a wrong answer; other answers left empty."""

    def build(nb, layout):
        gid = _first(layout)
        return C.with_cells(nb, {gid: prefix + zeroed(layout, gid) + "\n" + suffix})

    return build


def _find(layout: C.Layout, *names: str) -> str | None:
    for gid in layout.answers:
        if layout.defines[gid] in names:
            return gid
    return None


REBIND_TORCH = {
    "scaled_dot_product_attention": (
        "F.scaled_dot_product_attention = lambda query, key, value, attn_mask=None, **kwargs: (\n"
        "    scaled_dot_product_attention(query, key, value, attn_mask)[0]\n"
        ")\n"
    ),
    "layer_norm": (
        "torch.nn.functional.layer_norm = lambda x, shape, weight=None, bias=None, eps=1e-5: (\n"
        "    layer_norm(x, weight, bias, eps)\n"
        ")\n"
    ),
}


def _rebind_torch(nb, layout):
    for name, line in REBIND_TORCH.items():
        gid = _find(layout, name)
        if gid:
            return C.with_cells(nb, {gid: zeroed(layout, gid) + "\n" + line})
    return None


def _rebind_encoder_lib(nb, layout):
    gid = _find(layout, "LayerNorm", "MultiHeadAttention")
    if not gid:
        return None
    name = layout.defines[gid]
    line = f"encoder_lib.{name}.forward = {name}.forward\n"
    return C.with_cells(nb, {gid: zeroed(layout, gid) + "\n" + line})


DELEGATIONS = {
    "scaled_dot_product_attention": '''
def scaled_dot_product_attention(query, key, value, mask=None):
    """Delegates to PyTorch's fused kernel."""
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return output, torch.softmax(scores, dim=-1)
''',
    "MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    """Delegates to nn.MultiheadAttention."""

    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.mha = nn.MultiheadAttention(embed_dim, num_heads, dropout=dropout, batch_first=True)

    def forward(self, query, key, value, mask=None):
        return self.mha(
            query,
            key,
            value,
            attn_mask=None if mask is None else ~mask,
            need_weights=True,
            average_attn_weights=False,
        )
''',
    "layer_norm": '''
def layer_norm(x, weight, bias, eps=1e-5):
    """Delegates to F.layer_norm."""
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)
''',
}


def _delegate_torch(nb, layout):
    for name, source in DELEGATIONS.items():
        gid = _find(layout, name)
        if gid:
            return C.with_cells(nb, {gid: source})
    return None


def _delegate_encoder_lib(nb, layout):
    gid = _find(layout, "MultiHeadAttention", "FeedForward", "LayerNorm")
    if not gid:
        return None
    name = layout.defines[gid]
    return C.with_cells(nb, {gid: f"class {name}(encoder_lib.{name}):\n    pass\n"})


def _pre_setup(source: str, wrong_answers: bool):
    def build(nb, layout):
        if wrong_answers:
            nb = C.with_cells(
                nb, {g: zeroed(layout, g) for g in layout.answers if layout.defines[g]}
            )
        return C.with_first_cell(nb, source)

    return build


def _vars_bypass(nb, layout):
    line = (
        "for _name in list(vars(grading)):\n"
        '    if _name.startswith("check_"):\n'
        "        vars(grading)[_name] = lambda *args, **kwargs: None\n"
    )
    gid = _first(layout)
    empty = next(c.source for c in nb.cells if C.grade_id(c) == gid)  # the stub, still empty
    return C.with_cells(nb, {gid: empty + "\n" + line})


def _class_swap(nb, layout):
    line = (
        "import types\n\n"
        "grading.__class__ = types.ModuleType\n"
        "for _name in list(vars(grading)):\n"
        '    if _name.startswith("check_"):\n'
        "        setattr(grading, _name, lambda *args, **kwargs: None)\n"
    )
    gid = _first(layout)
    empty = next(c.source for c in nb.cells if C.grade_id(c) == gid)  # the stub, still empty
    return C.with_cells(nb, {gid: empty + "\n" + line})


CHECKERS = (
    "for _name in dir(grading):\n"
    '    if _name.startswith("check_"):\n'
    "        try:\n"
    "            setattr(grading, _name, lambda *args, **kwargs: None)\n"
    "        except AttributeError:\n"
    "            pass\n"
)

FAKE_GRADING = """from encoder_lib import grading


class FakeGrading:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


grading = FakeGrading()
"""

FORBIDDEN_SAYS = "already does what this exercise asks you to write"

CHEATS = [
    Cheat(
        "rebind_allclose",
        "torch.allclose = lambda *a, **k: True",
        _in_answer("torch.allclose = lambda *args, **kwargs: True\n"),
    ),
    Cheat(
        "rebind_assert_close",
        "torch.testing.assert_close = lambda *a, **k: None",
        _in_answer("torch.testing.assert_close = lambda *args, **kwargs: None\n"),
    ),
    Cheat(
        "rebind_checker",
        "grading.check_* = lambda *a, **k: None",
        _in_answer(CHECKERS),
    ),
    Cheat("fake_grading_object", "grading = FakeGrading()", _in_answer(FAKE_GRADING)),
    Cheat(
        "lying_tensor_subclass",
        "returns a Tensor subclass whose __torch_function__ says every comparison is equal",
        lambda nb, layout: C.with_cells(
            nb, {_first(layout): zeroed(layout, _first(layout), LIAR, "_lying")}
        ),
    ),
    Cheat(
        "rebind_torch_reference",
        "F.scaled_dot_product_attention = student_fn / torch.nn.functional.layer_norm = ...",
        _rebind_torch,
        spread="all",
    ),
    Cheat(
        "rebind_encoder_lib_reference",
        "encoder_lib.<Module>.forward = <student Module>.forward",
        _rebind_encoder_lib,
    ),
    Cheat(
        "delegate_to_torch",
        "the answer calls F.scaled_dot_product_attention / nn.MultiheadAttention / F.layer_norm",
        _delegate_torch,
        spread="all",
        expect="exercise",
        says=FORBIDDEN_SAYS,
    ),
    Cheat(
        "delegate_to_encoder_lib",
        "class <Module>(encoder_lib.<Module>): pass",
        _delegate_encoder_lib,
        expect="exercise",
        says=FORBIDDEN_SAYS,
    ),
    Cheat(
        "print_correct",
        'prints "Correct" and "All tests passed" after a wrong answer',
        _in_answer(
            'print("Correct: your answer matches the reference.")\nprint("All tests passed")\n'
        ),
    ),
    # --- beyond the brief's list ---
    Cheat(
        "patch_before_setup",
        "a cell inserted above the locked setup cell rebinds torch.allclose before grading's "
        "snapshot",
        _pre_setup("import torch\n\ntorch.allclose = lambda *args, **kwargs: True\n", True),
        extra=True,
    ),
    Cheat(
        "fake_grading_module",
        "a cell inserted above the setup cell puts a fake encoder_lib.grading in sys.modules",
        _pre_setup(FAKE_GRADING_MODULE, False),
        extra=True,
    ),
    Cheat(
        "checker_via_vars",
        "vars(grading)[name] = lambda *a, **k: None bypasses the read-only module",
        _vars_bypass,
        extra=True,
    ),
    Cheat(
        "checker_via_class_swap",
        "grading.__class__ = types.ModuleType, then grading.check_* = lambda *a, **k: None",
        _class_swap,
        extra=True,
    ),
    Cheat(
        "lying_function_mode",
        "a TorchFunctionMode entered and never left makes torch.allclose return True",
        _in_answer(LYING_MODE),
        extra=True,
    ),
]
