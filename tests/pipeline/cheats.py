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
    if type(out).__module__.startswith("jax"):  # notebook 10's arrays
        return out * 0
    if isinstance(out, tuple):
        return tuple(_zeroed(o) for o in out)
    if isinstance(out, list):  # notebook 11's tokens: one too many
        return [*out, "[UNK]"]
    if isinstance(out, torch.nn.Module):  # notebook 11's loaded layer: its weights zeroed
        with torch.no_grad():
            for p in out.parameters():
                p.zero_()
        return out
    if isinstance(out, int | float) and not isinstance(out, bool):
        return out + 1
    return out
'''


ZERO_LAYERS = '''
def _zero_layers(args):
    """Notebook 10's load_linear returns nothing: it writes into the layer it is given. Its
    wrong version zeroes what was written."""
    for arg in args:
        if type(arg).__module__.startswith("flax"):
            for param in (getattr(arg, "kernel", None), getattr(arg, "bias", None)):
                if param is not None:
                    param[...] = param[...] * 0
'''


def is_class(source: str, name: str) -> bool:
    return f"class {name}" in source


def is_nnx(source: str) -> bool:
    """A Flax NNX answer (notebook 10): called through ``__call__``, not ``forward``."""
    return "(nnx.Module)" in source


def zeroed(layout: C.Layout, gid: str, helper: str = ZEROED_HELPER, wrap: str = "_zeroed") -> str:
    """The reference answer of cell ``gid`` with every output replaced by ``wrap(output)``."""
    name, source = layout.defines[gid], layout.reference[gid]
    if is_class(source, name):
        method = "__call__" if is_nnx(source) else "forward"
        wrapper = f"""
_StudentImpl = {name}


class {name}(_StudentImpl):
    def {method}(self, *args, **kwargs):
        return {wrap}(super().{method}(*args, **kwargs))
"""
    else:
        wrapper = f"""
_student_impl = {name}


def {name}(*args, **kwargs):
    out = _student_impl(*args, **kwargs)
    _zero_layers(args)
    return {wrap}(out)
"""
    return source + "\n" + helper + ZERO_LAYERS + wrapper


def looping(layout: C.Layout, gid: str) -> str:
    """The reference answer of ``gid`` whose function (or ``forward``) never returns."""
    name, source = layout.defines[gid], layout.reference[gid]
    if is_class(source, name):
        return source + textwrap.dedent(f"""

            _StudentImpl = {name}


            class {name}(_StudentImpl):
                def {"__call__" if is_nnx(source) else "forward"}(self, *args, **kwargs):
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
    if type(out).__module__.startswith("jax"):  # notebook 10: no torch to lie through
        return out * 0
    if isinstance(out, tuple):
        return tuple(_lying(o) for o in out)
    if isinstance(out, list):  # notebook 11's tokens: no torch to lie through
        return [*out, "[UNK]"]
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
    """"nothing": the notebook scores 0; "exercise": the delegating exercise's tests score 0;
    "cells": each answer cell of the cheat's table (``CELLS``) is refused, its tests scoring 0
    under the cell's own mistake id."""
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


def _find(layout: C.Layout, *names: str, nnx: bool = False) -> str | None:
    """The answer cell defining one of ``names``: a PyTorch answer, or with ``nnx`` a Flax NNX
    one (notebook 10 reuses the names ``LayerNorm``, ``MultiHeadAttention``, ``FeedForward``)."""
    for gid in layout.answers:
        if layout.defines[gid] in names and is_nnx(layout.reference[gid]) == nnx:
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


DELEGATE_TO_FLAX = '''
class LayerNorm(nnx.Module):
    """Delegates to nnx.LayerNorm, with PyTorch's epsilon."""

    def __init__(self, num_features, *, epsilon=None, rngs=None):
        eps = 1e-5 if epsilon is None else epsilon
        self.norm = nnx.LayerNorm(num_features, epsilon=eps, rngs=rngs or nnx.Rngs(0))

    def __call__(self, x):
        return self.norm(x)
'''


def _delegate_flax(nb, layout):
    gid = _find(layout, "LayerNorm", nnx=True)
    return None if gid is None else C.with_cells(nb, {gid: DELEGATE_TO_FLAX})


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

# --- tricks that reach into the checks from the kernel (issue 11): each makes the in-kernel
# check pass for a wrong answer; at autograde the verdict is decided outside the kernel. -----

CODE_SWAP = """from encoder_lib import grading


def _noop_like(exercise):
    def check(obj, thorough=False):
        return exercise and None
    return check


for _name in dir(grading):
    if _name.startswith("check_"):
        getattr(grading, _name).__code__ = _noop_like(None).__code__
"""

CLOSURE_CELLS = """from encoder_lib import grading

for _name in dir(grading):
    if _name.startswith("check_"):
        for _cell in getattr(grading, _name).__closure__ or ():
            if hasattr(_cell.cell_contents, "cases"):
                _cell.cell_contents.cases = lambda thorough: iter(())
"""

GC_REACH = """import gc

for _obj in gc.get_objects():
    if type(_obj).__name__ == "Exercise" and hasattr(_obj, "cases"):
        _obj.cases = lambda thorough: iter(())
"""

PARENT_PACKAGE = """import types

import encoder_lib


class _Passes(types.ModuleType):
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


encoder_lib.grading = _Passes("encoder_lib.grading")
"""

MODULE_SETATTR = """import types

import encoder_lib.grading.runner

types.ModuleType.__setattr__(encoder_lib.grading.runner, "run", lambda *args, **kwargs: None)
type.__setattr__(encoder_lib.grading.runner.Exercise, "rewrite", None)
"""

STEPS_CLEARED = """from encoder_lib.grading import runner

runner.STEPS.clear()
"""

SETTRACE_LOCALS = """import ctypes
import sys
import threading


def _tracer(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_name == "close" and "grading" in code.co_filename:
        frame.f_locals["b"] = frame.f_locals["a"]
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
    return None


sys.settrace(_tracer)
threading.settrace(_tracer)
"""

IMPORT_SWAP = """import builtins
import types

_real_import = builtins.__import__
_passes = types.SimpleNamespace(**{
    name: (lambda *args, **kwargs: None)
    for name in dir(__import__("encoder_lib.grading").grading) if name.startswith("check_")
})


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    if name == "encoder_lib" and fromlist and "grading" in fromlist:
        return types.SimpleNamespace(grading=_passes)
    return _real_import(name, globals, locals, fromlist, level)


builtins.__import__ = _import
"""

SYS_MODULES_SWAP = """import sys
import types

import encoder_lib


class _Passes(types.ModuleType):
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


sys.modules["encoder_lib.grading"] = _Passes("encoder_lib.grading")
encoder_lib.__dict__["grading"] = sys.modules["encoder_lib.grading"]
"""

FAKE_SERVE = """import encoder_lib.grading.kernel.observe as _observe
from encoder_lib.grading import wire as _wire
from IPython.display import publish_display_data as _publish


def _made_up(call):
    shapes = [a for a in call.args if isinstance(a, torch.Tensor)]
    return _observe.Observation(value=torch.zeros_like(shapes[0]) if shapes else None)


def _serve(request):
    observations = [_made_up(call) for call in _wire.decode_calls(request)]
    _publish({_wire.MIME: _wire.encode_observations(observations)})


_wire.serve = _serve
"""

FROM_THE_CALLERS_FRAME = '''
def _expected_from_caller():
    """The value the check expects, if a caller's frame holds the case being judged."""
    frame = sys._getframe(2)
    while frame is not None:
        case = frame.f_locals.get("case")
        if case is not None and hasattr(case, "expected"):
            wanted = case.expected
            return wanted() if callable(wanted) else wanted
        frame = frame.f_back
    return None
'''


def _from_the_callers_frame(nb, layout):
    """The answer returns whatever a grader frame up the stack expects (wrong otherwise)."""
    gid = _first(layout)
    name, source = layout.defines[gid], layout.reference[gid]
    if is_class(source, name):
        body = f"""
_Impl = {name}


class {name}(_Impl):
    def forward(self, *args, **kwargs):
        wanted = _expected_from_caller()
        return wanted if wanted is not None else _zeroed(super().forward(*args, **kwargs))
"""
    else:
        body = f"""
_impl = {name}


def {name}(*args, **kwargs):
    wanted = _expected_from_caller()
    return wanted if wanted is not None else _zeroed(_impl(*args, **kwargs))
"""
    cell = "import sys\n\n" + source + "\n" + ZEROED_HELPER + FROM_THE_CALLERS_FRAME + body
    return C.with_cells(nb, {gid: cell})


TRAPS_OFF = {
    # The in-kernel trap switched off or gone around, then the right answer by delegation: the
    # held-out set of issue 18 earned full points with each of these. The judge reads the
    # answer cell's source in nbgrader's process and refuses the construct (the words each
    # feedback must say), whatever the kernel then does.
    "student_mode_patched": (
        "import contextlib\n\nimport encoder_lib.grading.kernel.observe as _observe\n\n"
        "_observe.student_mode = lambda *args, **kwargs: contextlib.nullcontext([])\n",
        "import encoder_lib.grading.kernel.observe as _observe",
    ),
    "profile_hook_off": ("import sys\n\nsys.setprofile(None)\n", "import sys"),
    "torch_function_off": (
        "_off = torch._C.DisableTorchFunction()\n_off.__enter__()\n",
        "torch._C.DisableTorchFunction",
    ),
    "forbidden_table_emptied": (
        "from encoder_lib.grading.kernel import forbidden as _forbidden\n\n"
        "_forbidden.FORBIDDEN.clear()\n",
        "from encoder_lib.grading.kernel import forbidden",
    ),
    "serve_wrapped": (
        "import encoder_lib\n\n_wire = encoder_lib.grading.wire\n"
        "_serve = _wire.serve\n_wire.serve = lambda *args, **kwargs: _serve(*args, **kwargs)\n",
        "encoder_lib.grading.wire",
    ),
    "global_import_hook": (
        "_real_import = __builtins__.__import__\n\n\n"
        "def __import__(name, *args, **kwargs):\n    return _real_import(name, *args, **kwargs)\n",
        "__import__",
    ),
    "proxy_in_sys_modules": (
        "import sys as _s\n\n_s.modules['encoder_lib.grading.kernel.observe'] = None\n",
        "import sys as _s",
    ),
    "post_run_cell_hook": (
        "get_ipython().events.register('post_run_cell', lambda *args: None)\n",
        "get_ipython",
    ),
    "code_copied": (
        "import types as _types\n\n"
        "_copy = _types.FunctionType(F.layer_norm.__code__, F.layer_norm.__globals__)\n",
        "import types",
    ),
    "grader_replayed": (
        "from encoder_lib.grading import n03_layer_norm as _cases\n",
        "from encoder_lib.grading import n03_layer_norm",
    ),
}


def _traps_off(name: str):
    """layer_norm delegates to F.layer_norm after ``TRAPS_OFF[name]`` ran in the same cell."""

    def build(nb, layout):
        gid = _find(layout, "layer_norm")
        if not gid:
            return None
        return C.with_cells(nb, {gid: TRAPS_OFF[name][0] + "\n" + DELEGATIONS["layer_norm"]})

    return build


FORBIDDEN_SAYS = "already does what this exercise asks you to write"

# --- issue 37: answers that reach the built-in by reflection, threads, serialisation, the operator
# registry, rebuilt functions, private names or the grader's own references. Each is a right
# answer by delegation, written fresh (the held-out set of issue 37 is not reused); the judge
# reads the source and refuses the construct, whatever the kernel then does. -------------------

LOOPHOLES = {
    # name: (answer's name, rule family, whole answer cell, what the feedback must say)
    "course_wide_mean_pool": (
        "masked_mean",
        "course-wide rules",
        "def masked_mean(h, keep):\n    return encoder_lib.mean_pool(h, keep)\n",
        FORBIDDEN_SAYS,
    ),
    "grader_private_reference": (
        "masked_mean",
        "grader",
        "from encoder_lib.grading.checks.n06_sentiment_capstone import _masked_mean as _mean\n\n\n"
        "def masked_mean(h, keep):\n    return _mean(h, keep)\n",
        "encoder_lib.grading",
    ),
    "thread_started_in_the_answer": (
        "masked_mean",
        "thread",
        "import threading\n\n\n"
        "def masked_mean(h, keep):\n"
        "    out = []\n"
        "    pool = encoder_lib.minilm\n"
        "    worker = threading.Thread(target=lambda: out.append(pool.mean_pool(h, keep)))\n"
        "    worker.start()\n"
        "    worker.join()\n"
        "    return out[0]\n",
        "import threading",
    ),
    "computed_getattr_on_library": (
        "causal_self_attention",
        "reflection",
        "def causal_self_attention(x, attention, keep=None):\n"
        "    make = getattr(encoder_lib, 'causal' + '_mask')\n"
        "    mask = make(x.shape[1], x.device)\n"
        "    if keep is not None:\n"
        "        mask = mask & keep[:, None, None, :]\n"
        "    return attention(x, x, x, mask)\n",
        "getattr() with a computed name",
    ),
    "methodcaller_on_library": (
        "causal_self_attention",
        "reflection",
        "import operator\n\n\n"
        "def causal_self_attention(x, attention, keep=None):\n"
        "    mask = operator.methodcaller('causal_mask', x.shape[1], x.device)(encoder_lib)\n"
        "    if keep is not None:\n"
        "        mask = mask & keep[:, None, None, :]\n"
        "    return attention(x, x, x, mask)\n",
        "operator.methodcaller",
    ),
    "aten_operator_registry": (
        "mlm_loss",
        "registry",
        "def mlm_loss(logits, labels):\n"
        "    return torch.ops.aten.cross_entropy_loss(\n"
        "        logits.flatten(0, 1), labels.flatten(), None, 1, -100, 0.0\n"
        "    )\n",
        FORBIDDEN_SAYS,
    ),
    "pickle_resolves_a_name": (
        "mlm_loss",
        "serialisation",
        "import pickle\n\n\n"
        "def mlm_loss(logits, labels):\n"
        "    loss = pickle.loads(b'ctorch.nn.functional\\ncross_entropy\\n.')\n"
        "    return loss(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)\n",
        "import pickle",
    ),
    "function_rebuilt_from_code": (
        "mlm_loss",
        "rebuilt function",
        "def mlm_loss(logits, labels):\n"
        "    ce = type(mlm_loss)(F.cross_entropy.__code__, F.cross_entropy.__globals__, 'ce')\n"
        "    ce.__defaults__ = F.cross_entropy.__defaults__\n"
        "    return ce(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)\n",
        ".__code__",
    ),
    "attrgetter_dotted_path": (
        "rms_norm",
        "reflection",
        "import operator\n\n\n"
        "def rms_norm(x, weight, eps=1e-6):\n"
        "    norm = operator.attrgetter('nn.functional.rms_norm')(torch)\n"
        "    return norm(x, x.shape[-1:], weight, eps)\n",
        "operator.attrgetter",
    ),
    "private_encoder_lib_name": (
        "rms_norm",
        "private name",
        "def rms_norm(x, weight, eps=1e-6):\n"
        "    norm = encoder_lib.modern_encoder._make_norm('rms', x.shape[-1], eps)\n"
        "    norm = norm.to(x.dtype)\n"
        "    with torch.no_grad():\n"
        "        norm.weight.copy_(weight)\n"
        "    return norm(x)\n",
        "_make_norm",
    ),
    "class_built_by_type": (
        "rms_norm",
        "internals",
        "def rms_norm(x, weight, eps=1e-6):\n"
        "    Passes = type('Passes', (torch.Tensor,), {})\n"
        "    return (x * 0).as_subclass(Passes)\n",
        "type(name, bases, dict)",
    ),
    "frame_globals": (
        "sentence_embedding",
        "internals",
        "def sentence_embedding(hidden, attention_mask):\n"
        "    frame = (lambda: (yield))().gi_frame\n"
        "    lib = frame.f_globals['encoder_lib']\n"
        "    return lib.sentence_embedding(hidden, attention_mask)\n",
        "gi_frame",
    ),
    "thread_pool": (
        "contrastive_loss",
        "thread",
        "from concurrent.futures import ThreadPoolExecutor\n\n\n"
        "def contrastive_loss(queries, documents, scale=20.0):\n"
        "    with ThreadPoolExecutor(1) as pool:\n"
        "        job = pool.submit(encoder_lib.contrastive_loss, queries, documents, scale)\n"
        "        return job.result()\n",
        "concurrent.futures",
    ),
}


def _loophole(name: str):
    """The answer of ``LOOPHOLES[name]`` in place of its answer cell (other answers empty)."""

    def build(nb, layout):
        gid = _find(layout, LOOPHOLES[name][0])
        return None if gid is None else C.with_cells(nb, {gid: LOOPHOLES[name][2]})

    return build


# --- issue 37 on notebook 10 (JAX, Flax NNX): one submission, one class of cheat per answer
# cell (a graded notebook 10 costs several times another). Each answer is right by delegation,
# written fresh against notebook 10's exercises; the judge reads the source and refuses each
# cell's own construct, under its own id, whatever the kernel then does. The LayerNorm one (a
# private name of Flax) earned its exercise's points before JAX's and Flax's private names were
# refused: nnx.LayerNorm's code without nnx.LayerNorm, which the kernel's trap does not watch. ---

JAX_GIVEN = {
    "FeedForward": """    def __init__(self, d_model, d_ff, dropout_rate=0.1, *, rngs):
        self.linear1 = nnx.Linear(d_model, d_ff, rngs=rngs)
        self.linear2 = nnx.Linear(d_ff, d_model, rngs=rngs)
        self.dropout_rate = dropout_rate
        self.rngs = rngs
""",
    "MultiHeadAttention": """    def __init__(self, d_model, num_heads, dropout_rate=0.1, *, rngs):
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.query = nnx.Linear(d_model, d_model, rngs=rngs)
        self.key = nnx.Linear(d_model, d_model, rngs=rngs)
        self.value = nnx.Linear(d_model, d_model, rngs=rngs)
        self.out = nnx.Linear(d_model, d_model, rngs=rngs)
        self.dropout_rate = dropout_rate
        self.rngs = rngs
""",
}
"""The ``__init__`` notebook 10 gives (its parameters' names are checked)."""

JAX_LAYER_NORM_INIT = (
    "class LayerNorm(nnx.Module):\n"
    "    def __init__(self, num_features, *, epsilon=None, rngs=None):\n"
    "        self.scale = nnx.Param(jnp.ones((num_features,)))\n"
    "        self.bias = nnx.Param(jnp.zeros((num_features,)))\n"
    "        self.epsilon = 1e-5 if epsilon is None else epsilon\n\n"
)
"""The start of the LayerNorm cheats of notebook 10: an ``nnx.Param`` scale and bias, as asked."""

JAX_LOOPHOLES = {
    # answer cell: (class of cheat, whole answer cell, what its test cells must say, mistake id)
    "jax_dropout": (
        "rebuilt function",
        "from encoder_lib import jax_encoder\n\n\n"
        "def dropout(x, rate, *, deterministic, key):\n"
        "    shared = jax_encoder.load_linear.__globals__\n"
        '    copy = type(dropout)(shared["drop" + "out"].__code__, shared, "copy")\n'
        "    return copy(x, rate, deterministic=deterministic, key=key)\n",
        "`.__globals__` (line 5)",
        "authorship-internals",
    ),
    "jax_load_linear": (
        "private name of encoder_lib",
        "def load_linear(layer, weight, bias):\n"
        "    to_torch, to_nnx = encoder_lib.jax_bridge.to_torch, encoder_lib.jax_bridge._to_nnx\n"
        '    layer.kernel[...] = to_nnx(to_torch(weight), "transpose")\n'
        "    if bias is not None:\n"
        "        layer.bias[...] = bias\n",
        "`encoder_lib.jax_bridge._to_nnx`",
        "authorship-private",
    ),
    "jax_layer_norm": (
        "private name of Flax",
        "from flax.nnx.nn import normalization\n\n\n"
        + JAX_LAYER_NORM_INIT
        + "    def __call__(self, x):\n"
        "        stats = normalization._compute_stats\n"
        "        mean, var = stats(x, (-1,), None, use_fast_variance=False)\n"
        "        scale, bias = self.scale[...], self.bias[...]\n"
        "        return normalization._normalize(\n"
        "            x, mean, var, scale, bias, (-1,), (-1,), None, self.epsilon\n"
        "        )\n",
        "`normalization._compute_stats` (line 11)",
        "authorship-internals",
    ),
    "jax_feed_forward": (
        "thread",
        "import _thread\n\nfrom encoder_lib import jax_encoder\n\n\n"
        "class FeedForward(nnx.Module):\n" + JAX_GIVEN["FeedForward"] + "\n"
        "    def __call__(self, x, *, deterministic):\n"
        "        out, done = [], _thread.allocate_lock()\n"
        "        done.acquire()\n\n"
        "        def work():\n"
        "            try:\n"
        "                reference = jax_encoder.FeedForward.__call__\n"
        "                out.append(reference(self, x, deterministic=deterministic))\n"
        "            finally:\n"
        "                done.release()\n\n"
        "        _thread.start_new_thread(work, ())\n"
        "        done.acquire()\n"
        "        return out[0]\n",
        "`import _thread` (line 1)",
        "authorship-thread",
    ),
    "jax_attention": (
        "computed getattr",
        "class MultiHeadAttention(nnx.Module):\n" + JAX_GIVEN["MultiHeadAttention"] + "\n"
        "    def __call__(self, x, *, padding_mask=None, deterministic):\n"
        "        B, L, D = x.shape\n"
        "        q, k, v = (\n"
        "            t.reshape(B, L, self.num_heads, self.d_head)\n"
        "            for t in (self.query(x), self.key(x), self.value(x))\n"
        "        )\n"
        "        mask = None if padding_mask is None else padding_mask[:, None, None, :]\n"
        '        attend = getattr(jax.nn, "dot_product" + "_attention")\n'
        "        return self.out(attend(q, k, v, mask=mask).reshape(B, L, D))\n",
        "getattr() with a computed name",
        "authorship-reflection",
    ),
    "jax_encoder_block": (
        "serialisation",
        "import pickle\n\n"
        'EncoderBlock = pickle.loads(b"cencoder_lib.jax_encoder\\nEncoderBlock\\n.")\n',
        "`import pickle` (line 1)",
        "authorship-serialisation",
    ),
}


JAX_FOUND = {
    # Two more that earned their exercise's points through the real nbgrader's judge before the
    # source rules read them (a second submission: one answer cell holds one cheat).
    "jax_load_linear": (
        "module handed on as a value",
        "def load_linear(layer, weight, bias):\n"
        "    bridge = encoder_lib.jax_bridge\n"
        '    layer.kernel[...] = bridge._to_nnx(bridge.to_torch(weight), "transpose")\n'
        "    if bias is not None:\n"
        "        layer.bias[...] = bias\n",
        "`encoder_lib.jax_bridge as a value` (line 2)",
        "authorship-reflection",
    ),
    "jax_layer_norm": (
        "a module a library imported (the kernel's watch off, nnx.LayerNorm by its module's path)",
        "from flax.nnx.nn.normalization import LayerNorm as FlaxLayerNorm\n\n\n"
        + JAX_LAYER_NORM_INIT
        + "    def __call__(self, x):\n"
        "        nnx.reprlib.sys.setprofile(None)\n"
        "        norm = FlaxLayerNorm(\n"
        "            x.shape[-1], epsilon=self.epsilon, use_fast_variance=False, rngs=nnx.Rngs(0)\n"
        "        )\n"
        "        norm.scale[...] = self.scale[...]\n"
        "        norm.bias[...] = self.bias[...]\n"
        "        return norm(x)\n",
        "`nnx.reprlib.sys.setprofile` (line 11)",
        "authorship-internals",
    ),
}

CELLS = {"jax_loopholes": JAX_LOOPHOLES, "jax_found_loopholes": JAX_FOUND}
"""The cheats of ``expect="cells"``: their table of answer cells."""


def _cells(table: dict):
    """Every answer of ``table`` in its cell (notebook 10 only; the other answers left empty)."""

    def build(nb, layout):
        if not set(table) <= set(layout.answers):
            return None
        return C.with_cells(nb, {gid: cell for gid, (_, cell, _, _) in table.items()})

    return build


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
        "delegate_to_flax",
        "notebook 10's LayerNorm wraps nnx.LayerNorm (with PyTorch's epsilon)",
        _delegate_flax,
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
    # --- reaching into the checks from the kernel (issue 11) ---
    Cheat(
        "check_code_swap",
        "every grading.check_*.__code__ replaced by a function that returns at once",
        _in_answer(CODE_SWAP),
    ),
    Cheat(
        "closure_cells",
        "the exercise held in each check's closure loses its cases",
        _in_answer(CLOSURE_CELLS),
    ),
    Cheat(
        "gc_reach",
        "gc.get_objects() finds every Exercise and empties its cases",
        _in_answer(GC_REACH),
    ),
    Cheat(
        "parent_package_attribute",
        "encoder_lib.grading replaced on the parent package by a module whose checks pass",
        _in_answer(PARENT_PACKAGE),
    ),
    Cheat(
        "module_and_class_setattr",
        "ModuleType.__setattr__ / object.__setattr__ rebind the runner and the Exercise class",
        _in_answer(MODULE_SETATTR),
    ),
    Cheat(
        "steps_cleared",
        "the runner's generic checks (runner.STEPS) cleared",
        _in_answer(STEPS_CLEARED),
    ),
    Cheat(
        "settrace_locals",
        "sys.settrace rewrites the comparison's locals (b = a) in every call to close()",
        _in_answer(SETTRACE_LOCALS),
    ),
    Cheat(
        "caller_frame",
        "the answer reads the expected value out of the grader's frame up the stack",
        _from_the_callers_frame,
    ),
    Cheat(
        "builtins_import_swap",
        "builtins.__import__ swapped: `from encoder_lib import grading` gives checks that pass",
        _in_answer(IMPORT_SWAP),
    ),
    Cheat(
        "sys_modules_swap",
        "sys.modules['encoder_lib.grading'] (and the package attribute) replaced by a fake",
        _in_answer(SYS_MODULES_SWAP),
    ),
    Cheat(
        "fake_serve",
        "the kernel end of the grader's requests answers with made-up tensors",
        _in_answer(FAKE_SERVE),
    ),  # --- a right answer by delegation, the kernel's trap switched off (issue 18) ---
    *(
        Cheat(
            name,
            f"layer_norm delegates to F.layer_norm after {says} (the trap off or gone around)",
            _traps_off(name),
            expect="exercise",
            says=says,
        )
        for name, (_, says) in TRAPS_OFF.items()
    ),
    # --- issue 37: reflection, threads, serialisation, registry, rebuilt functions, grader ---
    *(
        Cheat(
            name,
            f"{answer} delegates by {family}: the judge reads `{says}`",
            _loophole(name),
            expect="exercise",
            says=says,
        )
        for name, (answer, family, _, says) in LOOPHOLES.items()
    ),
    Cheat(
        "jax_loopholes",
        "notebook 10's answers delegate by a rebuilt function, a private name of encoder_lib, "
        "a private name of Flax, a thread, a computed getattr and pickle, one per answer cell",
        _cells(JAX_LOOPHOLES),
        expect="cells",
    ),
    Cheat(
        "jax_found_loopholes",
        "notebook 10's answers delegate through a module handed on as a value and, the kernel's "
        "watch switched off by a module Flax imported (nnx.reprlib.sys), to nnx.LayerNorm",
        _cells(JAX_FOUND),
        expect="cells",
    ),
]

REQUIRED = {
    # the brief's list and the tricks found since (issue 11); the ratchet in test_integrity
    "rebind_allclose", "rebind_assert_close", "rebind_checker", "fake_grading_object",
    "lying_tensor_subclass", "rebind_torch_reference", "rebind_encoder_lib_reference",
    "delegate_to_torch", "delegate_to_encoder_lib", "print_correct", "patch_before_setup",
    "fake_grading_module", "checker_via_vars", "checker_via_class_swap", "lying_function_mode",
    "check_code_swap", "closure_cells", "gc_reach", "parent_package_attribute",
    "module_and_class_setattr", "steps_cleared", "settrace_locals", "caller_frame",
    "builtins_import_swap", "sys_modules_swap", "fake_serve", "delegate_to_flax",
    *TRAPS_OFF, *LOOPHOLES, *CELLS,
}  # fmt: skip

ALL = CHEATS
