"""The authorship rules the judge reads from the answer cells' source at autograde
(``encoder_lib.autograde.authorship``), on the real solution notebooks and tests/variants.

- No false reject: every reference answer and every correct variant of every notebook breaks no
  rule, for any exercise.
- Every buggy variant the rules refuse delegates to what its own exercise forbids, and the
  refusal says what the variant's test expects the feedback to say.
- Each construct of the brief is named, in the exercise that uses it and in every later one.
- What valid answers need stays allowed: ``getattr`` on ``self`` or with a literal name,
  ``super().__init__``, a library function the exercise does not forbid.

That the judge applies them through the real nbgrader is tests/pipeline/test_integrity.py.
"""

from __future__ import annotations

from functools import cache

import pytest
from pipeline import course as C
from variants import ASSIGNMENTS, load

from encoder_lib.autograde import authorship as A
from encoder_lib.grading import runner


@cache
def notebook(assignment: str):
    return C.read(C.source_notebook(assignment))


def judged(nb):
    """(index, exercise) of every judged test cell."""
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            exercise = runner.EXERCISES.get(meta.get("grade_id"))
            if exercise is not None:
                yield i, exercise


def refusals(nb) -> dict[str, tuple[list, list]]:
    """test cell -> (own, earlier) breaches, for the test cells that have any."""
    found = {}
    for i, exercise in judged(nb):
        own, earlier = A.breaches(nb.cells, i, exercise.name)
        if own or earlier:
            found[exercise.test_cell] = (own, earlier)
    return found


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_reference_and_correct_answers_break_no_rule(assignment):
    nb = notebook(assignment)
    assert list(judged(nb)), f"{assignment}: no judged test cell found"
    assert refusals(nb) == {}
    _, correct = load(assignment)
    for variant in correct:
        found = refusals(C.with_cells(nb, {variant.cell: variant.source}))
        assert found == {}, f"{assignment} correct variant {variant.name}: {found}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_refused_buggy_variants_delegate_and_are_told_so(assignment):
    nb = notebook(assignment)
    buggy, _ = load(assignment)
    for variant in buggy:
        found = refusals(C.with_cells(nb, {variant.cell: variant.source}))
        for test_cell, (own, earlier) in found.items():
            assert not earlier and all(b.own for b in own), (variant.name, own, earlier)
            assert test_cell in variant.fails, (variant.name, test_cell, variant.fails)
            error = A.refusal(runner.EXERCISES[test_cell], own, earlier)
            assert error.mistake == "forbidden-built-in"
            if variant.says and test_cell == variant.fails[0]:
                assert C.says(error.problem, variant.says), (variant.name, error.problem)


def test_the_forbidden_built_ins_are_found_through_imports_and_aliases():
    nb = notebook("03_layer_norm")
    for source in (
        "def layer_norm(x, weight, bias, eps=1e-5):\n"
        "    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)\n",
        "from torch.nn.functional import layer_norm as ln\n\n"
        "def layer_norm(x, weight, bias, eps=1e-5):\n"
        "    return ln(x, x.shape[-1:], weight, bias, eps)\n",
        "import torch.nn.functional as G\n\n"
        "def layer_norm(x, weight, bias, eps=1e-5):\n"
        "    return G.layer_norm(x, x.shape[-1:], weight, bias, eps)\n",
        "def layer_norm(x, weight, bias, eps=1e-5):\n"
        "    f = torch.nn.functional.layer_norm\n"
        "    return f(x, x.shape[-1:], weight, bias, eps)\n",
    ):
        found = refusals(C.with_cells(nb, {"answer_layer_norm": source}))
        own, _ = found["test_layer_norm"]
        assert own and own[0].own, source
        assert own[0].rule.startswith("F.layer_norm"), own[0]


EVASIONS = {
    "sys.setprofile(None)": "sys.setprofile",
    "import sys\nsys.settrace(None)": "import sys",
    "sys.modules['encoder_lib.grading'] = None": "sys.modules",
    "import gc\nobjs = gc.get_objects()": "import gc",
    "import ctypes": "import ctypes",
    "import importlib\nm = importlib.import_module('torch')": "import importlib",
    "m = __import__('torch')": "__import__",
    "exec('y = 1')": "exec",
    "y = eval('1')": "eval",
    "c = compile('1', 'x', 'eval')": "compile",
    "g = globals()": "globals",
    "v = vars(torch)": "vars",
    "name = 'soft' + 'max'\nf = getattr(torch, name)": "getattr() with a computed name",
    "setattr(torch, 'allclose', print)": "setattr(torch, ...)",
    "k = F.softmax.__code__": ".__code__",
    "k = print.__self__": ".__self__",
    "b = __builtins__": "__builtins__",
    "with torch._C.DisableTorchFunction():\n    pass": "torch._C.DisableTorchFunction",
    "from torch import _C": "from torch import _C",
    "get_ipython().events.register('post_run_cell', print)": "get_ipython",
    "%load_ext autoreload": "%load_ext",
    "!pip install something": "!pip",
    "from encoder_lib.grading.kernel import forbidden\nforbidden.FORBIDDEN.clear()": (
        "from encoder_lib"
    ),
    "import encoder_lib.autograde": "import encoder_lib.autograde",
    "encoder_lib.grading.kernel.forbidden.FORBIDDEN.clear()": "encoder_lib.grading",
    "import types\nf = types.FunctionType": "import types",
    "torch.allclose = lambda *a, **k: True": "torch.allclose = ...",
    "F.softmax = print": "F.softmax = ...",
    # issue 37: reflection, threads, serialisation, registries, rebuilt functions, the grader
    "f = getattr(F, 'soft' + 'max')": ("getattr() with a computed name", "authorship-reflection"),
    "import operator\nf = operator.attrgetter('nn.functional.layer_norm')(torch)": (
        "operator.attrgetter",
        "authorship-reflection",
    ),
    "from operator import methodcaller": (
        "from operator import methodcaller",
        "authorship-reflection",
    ),
    "import pickle": ("import pickle", "authorship-serialisation"),
    "import marshal as m": ("import marshal as m", "authorship-serialisation"),
    "import copyreg": ("import copyreg", "authorship-serialisation"),
    "import shelve": ("import shelve", "authorship-serialisation"),
    "import dill": ("import dill", "authorship-serialisation"),
    "m = torch.load('w.pt', weights_only=False)": ("torch.load", "authorship-serialisation"),
    "import threading": ("import threading", "authorship-thread"),
    "import _thread": ("import _thread", "authorship-thread"),
    "from concurrent.futures import ThreadPoolExecutor": (
        "from concurrent.futures import ThreadPoolExecutor",
        "authorship-thread",
    ),
    "import multiprocessing.dummy": ("import multiprocessing.dummy", "authorship-thread"),
    "import asyncio": ("import asyncio", "authorship-thread"),
    "import os\npid = os.fork()": ("os.fork", "authorship-thread"),
    "import os\nos.system('true')": ("os.system", "authorship-thread"),
    "import os\nos.spawnv(os.P_WAIT, '/bin/true', ['true'])": ("os.spawnv", "authorship-thread"),
    "fut = torch.jit.fork(torch.add, 1, 2)": ("torch.jit.fork", "authorship-thread"),
    "T = type('T', (object,), {})": ("type(name, bases, dict)", "authorship-internals"),
    "g = F.softmax.__globals__": (".__globals__", "authorship-internals"),
    "c = (lambda: 0).__closure__": (".__closure__", "authorship-internals"),
    "fr = (i for i in ()).gi_frame": (".gi_frame", "authorship-internals"),
    "op = torch.ops.aten.add.Tensor": ("torch.ops.aten.add.Tensor", "authorship-registry"),
    "from torch import ops": ("from torch import ops", "authorship-registry"),
    "import torch._ops": ("import torch._ops", "authorship-registry"),
    "o = getattr(torch, 'ops')": ("torch.ops", "authorship-registry"),
    "c = getattr(getattr(torch, '_C'), '_nn')": ("torch._C._nn", "authorship-internals"),
    "from encoder_lib.layer_norm import _helper": (
        "from encoder_lib.layer_norm import _helper",
        "authorship-private",
    ),
    "b = encoder_lib.encoder.EncoderLayer._sa_block": (
        "encoder_lib.encoder.EncoderLayer._sa_block",
        "authorship-private",
    ),
    "g = getattr(encoder_lib, 'grading')": ("encoder_lib.grading", "authorship-grader"),
    "import functools\nf = functools.reduce(getattr, ['nn', 'functional'], torch)": (
        "getattr as a value",
        "authorship-reflection",
    ),
    "import string\nf = string.Formatter().get_field('0.softmax', [F], {})": (
        "string.Formatter",
        "authorship-reflection",
    ),
    "import timeit\nt = timeit.timeit('1 + 1', number=1)": (
        "import timeit",
        "authorship-reflection",
    ),
    "import cProfile\ncProfile.Profile().enable()": ("import cProfile", "authorship-internals"),
    # a module handed on as a value: what is taken from it afterwards would escape every rule
    "t = torch\noff = t._C.DisableTorchFunction()": ("torch as a value", "authorship-reflection"),
    "ln = F": ("F as a value", "authorship-reflection"),
    "def ln(x, lib=torch):\n    return x": ("torch as a value", "authorship-reflection"),
    "libs = [encoder_lib]": ("encoder_lib as a value", "authorship-reflection"),
    "lib = encoder_lib.layer_norm": ("encoder_lib.layer_norm as a value", "authorship-reflection"),
    "nn_ = getattr(torch, 'nn')": ("torch.nn as a value", "authorship-reflection"),
    # a module a library imported, reached through the library
    "torch.sys.setprofile(None)": ("torch.sys.setprofile", "authorship-internals"),
    "T = torch.threading.Thread": ("torch.threading.Thread", "authorship-thread"),
    "c = torch.cpp": ("torch.cpp", "authorship-internals"),
    "o = F.torch.overrides": ("F.torch.overrides", "authorship-internals"),
    "m = encoder_lib.minilm.importlib": ("encoder_lib.minilm.importlib", "authorship-reflection"),
}
"""Source put before a right answer of layer_norm -> what the refusal must name (and, for
the rules of issue 37, its mistake id)."""

RIGHT_LAYER_NORM = (
    "def layer_norm(x, weight, bias, eps=1e-5):\n"
    "    mean = x.mean(-1, keepdim=True)\n"
    "    var = ((x - mean) ** 2).mean(-1, keepdim=True)\n"
    "    return (x - mean) / torch.sqrt(var + eps) * weight + bias\n"
)


@pytest.mark.parametrize("line", EVASIONS, ids=range(len(EVASIONS)))
def test_each_evasion_is_named_here_and_costs_every_later_exercise(line):
    nb = notebook("03_layer_norm")
    found = refusals(C.with_cells(nb, {"answer_layer_norm": line + "\n\n" + RIGHT_LAYER_NORM}))
    own, earlier = found["test_layer_norm"]
    assert own and not own[0].own
    error = A.refusal(runner.EXERCISES["test_layer_norm"], own, earlier)
    assert error.mistake in A.MISTAKES and error.mistake != "forbidden-built-in"
    named, mistake = EVASIONS[line] if isinstance(EVASIONS[line], tuple) else (EVASIONS[line], "")
    assert named in error.problem, error.problem
    assert not mistake or error.mistake == mistake, (error.mistake, mistake)
    assert "'answer_layer_norm'" in error.problem
    later = [t for t in found if t != "test_layer_norm"]
    assert later, "the exercises graded after it are not refused"
    for test_cell in later:
        own, earlier = found[test_cell]
        assert not own and earlier
        error = A.refusal(runner.EXERCISES[test_cell], own, earlier)
        assert "an earlier answer cell, 'answer_layer_norm'" in error.problem


def test_what_valid_answers_need_stays_allowed():
    allowed = (
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.names = ['a', 'b']\n"
        "    def forward(self, x):\n"
        "        for name in self.names:\n"
        "            x = getattr(self, name)(x)\n"
        "        if hasattr(x, 'shape'):\n"
        "            x = getattr(x, 'float')()\n"
        "        return torch.softmax(x, -1) + F.relu(x) + math.sqrt(2)\n"
    )
    assert A.cell_breaches("c", allowed, {"torch": "torch", "F": "torch.nn.functional"}, None) == []


ONLY_HERE = {
    "ln = torch._refs.nn.functional.layer_norm": "torch._refs.nn.functional.layer_norm",
    "v = torch._VF": "torch._VF",
    "p = F._in_projection_packed": "F._in_projection_packed",
}
"""torch's other private names: refused where they are used (they only reach a built-in under
another name), not in the exercises graded after it."""


@pytest.mark.parametrize("line", ONLY_HERE, ids=range(len(ONLY_HERE)))
def test_a_private_torch_name_costs_its_own_exercise_only(line):
    nb = notebook("03_layer_norm")
    found = refusals(C.with_cells(nb, {"answer_layer_norm": line + "\n\n" + RIGHT_LAYER_NORM}))
    assert list(found) == ["test_layer_norm"], found
    own, earlier = found["test_layer_norm"]
    error = A.refusal(runner.EXERCISES["test_layer_norm"], own, earlier)
    assert error.mistake == "authorship-internals" and ONLY_HERE[line] in error.problem


JAX_PRIVATE = {
    "from flax.nnx.nn import normalization\n\nstats = normalization._compute_stats": (
        "normalization._compute_stats"
    ),
    "from jax._src.nn.functions import standardize": (
        "from jax._src.nn.functions import standardize"
    ),
    "s = jax._src.nn.functions.standardize": "jax._src.nn.functions.standardize",
    "n = nnx.nn.normalization._normalize": "nnx.nn.normalization._normalize",
    "import optax\n\nt = optax._src.transform": "optax._src.transform",
}
"""Private names of JAX, Flax and optax, refused as torch's are, where they are used. The source
rules read them by name (nbgrader's process never imports JAX). Before they were refused, a
LayerNorm built from Flax's private ``_compute_stats`` and ``_normalize`` (``nnx.LayerNorm``'s
code without being it, so the kernel's trap, which watches ``nnx.LayerNorm``'s own methods, did
not see it) earned notebook 10's exercise 3 its points."""


@pytest.mark.parametrize("line", JAX_PRIVATE, ids=range(len(JAX_PRIVATE)))
def test_a_private_jax_or_flax_name_costs_its_own_exercise_only(line):
    nb = notebook("10_jax_encoder")
    right = next(c.source for c in nb.cells if C.grade_id(c) == "jax_layer_norm")
    found = refusals(C.with_cells(nb, {"jax_layer_norm": line + "\n\n" + right}))
    assert list(found) == ["test_jax_layer_norm"], found
    own, earlier = found["test_jax_layer_norm"]
    error = A.refusal(runner.EXERCISES["test_jax_layer_norm"], own, earlier)
    assert error.mistake == "authorship-internals" and JAX_PRIVATE[line] in error.problem


JAX_EVASIONS = {
    "from flax.nnx.nn import normalization\n\nnorms = normalization\ns = norms._compute_stats": (
        "normalization as a value",
        "authorship-reflection",
    ),
    "bridge = encoder_lib.jax_bridge": (
        "encoder_lib.jax_bridge as a value",
        "authorship-reflection",
    ),
    "nnx.reprlib.sys.setprofile(None)": ("nnx.reprlib.sys.setprofile", "authorship-internals"),
    "T = nnx.variablelib.threading.Thread": (
        "nnx.variablelib.threading.Thread",
        "authorship-thread",
    ),
    "lock = jax.version.subprocess.Popen": ("jax.version.subprocess.Popen", "authorship-thread"),
}
"""Evasions found on notebook 10 (issue 37): each earned exercise 3 its points with a LayerNorm
that called Flax's code (``flax.nnx.nn.normalization``'s helpers, or ``nnx.LayerNorm`` by its
module's path after ``torch.sys.setprofile(None)`` / ``nnx.reprlib.sys.setprofile(None)``
switched the kernel's watch off), the source rules seeing nothing. They are read by name here:
nbgrader's process never imports JAX."""


@pytest.mark.parametrize("line", JAX_EVASIONS, ids=range(len(JAX_EVASIONS)))
def test_evasions_through_jax_and_flax_are_named_and_cost_every_later_exercise(line):
    nb = notebook("10_jax_encoder")
    right = next(c.source for c in nb.cells if C.grade_id(c) == "jax_layer_norm")
    found = refusals(C.with_cells(nb, {"jax_layer_norm": line + "\n\n" + right}))
    own, earlier = found["test_jax_layer_norm"]
    error = A.refusal(runner.EXERCISES["test_jax_layer_norm"], own, earlier)
    named, mistake = JAX_EVASIONS[line]
    assert named in error.problem and error.mistake == mistake, (error.mistake, error.problem)
    later = [t for t in found if t != "test_jax_layer_norm"]
    assert "test_jax_encoder_block" in later, "the exercises graded after it are not refused"


FLAX_LINEN = {
    "jax_layer_norm": "import flax.linen\n\nln = flax.linen.LayerNorm(epsilon=1e-5)",
    "jax_attention": (
        "from flax.nnx.nn.attention import dot_product_attention_weights\n\n"
        "w = dot_product_attention_weights"
    ),
}
"""The same computations from Flax's other API (``flax.linen``) or a module path: each passed
notebook 10's checks with no rule broken until they were forbidden (issue 37's notebook-10
cheats found them)."""


@pytest.mark.parametrize("cell", FLAX_LINEN)
def test_flax_linen_and_module_paths_are_forbidden_too(cell):
    nb = notebook("10_jax_encoder")
    right = next(c.source for c in nb.cells if C.grade_id(c) == cell)
    found = refusals(C.with_cells(nb, {cell: FLAX_LINEN[cell] + "\n\n" + right}))
    test_cell = f"test_{cell}"
    assert test_cell in found, found
    own, earlier = found[test_cell]
    error = A.refusal(runner.EXERCISES[test_cell], own, earlier)
    assert error.mistake == "forbidden-built-in", (error.mistake, error.problem)
