"""The checks of notebook 10 (the encoder in JAX): what is particular to them (the grader's
PyTorch formulas equal PyTorch's modules, in training mode too, with the masks an answer drew;
the grader's side never imports JAX; the verdicts are the same through the wire). Every answer of
tests/variants, buggy, correct or stub, is graded in test_catalogue.py."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from grading.notebook_namespace import Check, SolutionNotebook
from torch import nn

pytest.importorskip("flax.nnx")

from encoder_lib.course import JAX_CACHE_READ_ONLY_VARIABLE
from encoder_lib.grading import runner, vocabulary
from encoder_lib.grading.checks import n10_jax_encoder
from encoder_lib.grading.kernel import observe_jax
from encoder_lib.grading.kernel.observe import Observation

CHECKS = {
    "test_jax_dropout": Check("jax_dropout", "dropout", n10_jax_encoder.check_jax_dropout),
    "test_jax_load_linear": Check(
        "jax_load_linear", "load_linear", n10_jax_encoder.check_jax_load_linear
    ),
    "test_jax_layer_norm": Check(
        "jax_layer_norm", "LayerNorm", n10_jax_encoder.check_jax_layer_norm
    ),
    "test_jax_feed_forward": Check(
        "jax_feed_forward", "FeedForward", n10_jax_encoder.check_jax_feed_forward
    ),
    "test_jax_attention": Check(
        "jax_attention", "MultiHeadAttention", n10_jax_encoder.check_jax_attention
    ),
    "test_jax_encoder_block": Check(
        "jax_encoder_block", "EncoderBlock", n10_jax_encoder.check_jax_encoder_block
    ),
    "test_jax_train_step": Check(
        "jax_train_step", "train_step", n10_jax_encoder.check_jax_train_step
    ),
}
POINTS = {
    "test_jax_dropout": 1,
    "test_jax_load_linear": 1,
    "test_jax_layer_norm": 2,
    "test_jax_feed_forward": 1,
    "test_jax_attention": 2,
    "test_jax_encoder_block": 2,
    "test_jax_train_step": 2,
}
NOTEBOOK = SolutionNotebook("10_jax_encoder", CHECKS)


def test_notebook_has_the_cells_and_points_the_checks_expect():
    NOTEBOOK.assert_cells_and_points(POINTS)
    assert sum(POINTS.values()) == 11


def _with_masks(monkeypatch, masks, p: float) -> None:
    """PyTorch's own layer with given dropout masks: ``F.dropout`` and the dropout inside
    ``F.scaled_dot_product_attention`` (which ``nn.MultiheadAttention`` calls) apply the next
    mask instead of drawing one."""
    queue = list(masks)

    def apply(t):
        return torch.where(queue.pop(0), t / (1 - p), torch.zeros_like(t))

    def dropout(input, p=0.5, training=True, inplace=False):
        return apply(input) if training and p > 0 else input

    def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        elif attn_mask is not None:
            scores = scores + attn_mask
        weights = scores.softmax(-1)
        return (apply(weights) if dropout_p > 0 else weights) @ v

    monkeypatch.setattr(F, "dropout", dropout)
    monkeypatch.setattr(F, "scaled_dot_product_attention", attention)


@pytest.mark.parametrize("train", [False, True])
def test_the_block_written_out_by_the_catalogue_is_pytorch_s_layer(train, monkeypatch):
    """Every named mistake of the block is ``_block`` with one thing changed: unchanged, it must
    give nn.TransformerEncoderLayer's output, in training mode with the same masks."""
    torch.manual_seed(0)
    B, L, D, H, d_ff, p = 2, 5, 16, 4, 32, 0.25
    layer = nn.TransformerEncoderLayer(D, H, d_ff, p, batch_first=True)
    state = n10_jax_encoder._randomised(layer, 7)
    x = torch.randn(B, L, D)
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    shapes = [(B, H, L, L), (B, L, D), (B, L, d_ff), (B, L, D)]
    masks = [torch.rand(s) > p for s in shapes] if train else [None] * 4
    with torch.no_grad():
        if train:
            _with_masks(monkeypatch, masks, p)
            want = layer.train()(x, src_key_padding_mask=~keep)
        else:
            want = layer.eval()(x, src_key_padding_mask=~keep)
    got = n10_jax_encoder._block(state, x, keep, H, masks, p)
    torch.testing.assert_close(got[keep], want[keep], atol=1e-5, rtol=1e-4)


def test_the_attention_and_network_written_out_are_pytorch_s():
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    state = n10_jax_encoder._randomised(mha, 3)
    x = torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 4 + [False], [True] * 2 + [False] * 3])
    with torch.no_grad():
        want, _ = mha(x, x, x, key_padding_mask=~keep)
    torch.testing.assert_close(
        n10_jax_encoder._attention(state, x, keep, 4), want, atol=1e-5, rtol=1e-4
    )
    ff = nn.Sequential()
    ff.linear1, ff.linear2 = nn.Linear(16, 24), nn.Linear(24, 16)
    with torch.no_grad():
        torch.testing.assert_close(
            n10_jax_encoder._feed_forward(ff.state_dict(), x), ff.linear2(F.relu(ff.linear1(x)))
        )


def _recorded(case, seed: int = 0) -> None:
    """Show a training-mode case's precheck the dropout calls a right answer records (random
    masks at the case's sites, two steps), so that its reference and mistakes can be computed."""
    g = torch.Generator().manual_seed(seed)
    rate = case.call.init[0][-1]
    steps = [
        [
            {"rate": rate, "deterministic": False, "shape": shape, "key": torch.tensor([seed, i]),
             "mask": torch.rand(shape, generator=g) > rate}
            for i, (shape, _) in enumerate(case.precheck.sites)
        ]
        for _ in range(case.call.options["steps"])
    ]  # fmt: skip
    assert case.precheck(Observation(info={"dropout": steps})) is None


def test_every_named_mistake_can_be_told_from_the_reference():
    """Each catalogue entry differs from the reference on some case of its exercise (a mistake
    that equals the reference everywhere could never be named); the epsilon mistakes show only
    on small activations and "dropout on the sum" only in training, which is why those
    exercises have such cases."""
    for exercise in (runner.EXERCISES[t] for t in CHECKS):
        seen: dict[str, bool] = {}
        for case in exercise.cases(True):
            if case.judge is not None:
                continue
            if case.call.train:
                _recorded(case)
            want = runner._computed(case.expected)
            for text, value in (runner._computed(case.mistakes) or {}).items():
                differs = not vocabulary.close(value, want, case.atol, case.rtol)
                seen[text] = seen.get(text, False) or differs
        assert all(seen.values()), [text for text, differs in seen.items() if not differs]


def test_the_grader_s_side_never_imports_jax():
    """The cases, their PyTorch references and the catalogue are built without JAX: nbgrader's
    process judges notebook 10 with torch alone."""
    code = (
        "import sys\n"
        "from encoder_lib.grading import runner\n"
        "from encoder_lib.grading.checks import n10_jax_encoder\n"
        "for exercise in runner.EXERCISES.values():\n"
        "    if exercise.topic != n10_jax_encoder.__name__: continue\n"
        "    for case in exercise.cases(True):\n"
        "        if case.call.train: continue  # needs an answer's masks; same formulas\n"
        "        runner._computed(case.expected); runner._computed(case.mistakes)\n"
        "assert not {'jax', 'flax'} & set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "way", ["", "l2", "betas swapped", "lr and wd swapped", "no decay", "fresh state"]
)
def test_the_training_step_s_replay_is_torch_optim_s_adamw(way):
    """The grader's replay of exercise 7 (PyTorch's functional Adam, called as the classes call
    it) ends every step with the weights ``torch.optim.AdamW`` (``Adam`` for L2) gives, bit for
    bit, for the reference and for each named mistake."""
    case = next(n10_jax_encoder._cases(False))
    state, batches = case.call.state, case.call.options["batches"]
    lr, betas, wd = case.call.options["hyper"]
    D, H, d_ff = n10_jax_encoder._SIZES
    layer = nn.TransformerEncoderLayer(D, H, d_ff, 0.1, batch_first=True)
    layer.load_state_dict(state)
    layer.eval()

    def optimiser():
        if way == "l2":
            return torch.optim.Adam(layer.parameters(), lr, betas, weight_decay=wd)
        rate, b, decay = lr, betas, wd
        if way == "betas swapped":
            b = betas[::-1]
        elif way == "lr and wd swapped":
            rate, decay = wd, lr
        elif way == "no decay":
            decay = 0.0
        return torch.optim.AdamW(layer.parameters(), rate, b, weight_decay=decay)

    replayed = n10_jax_encoder._replay(state, batches, lr, betas, wd, way)
    opt = optimiser()
    for (x, y), step in zip(batches, replayed, strict=True):
        opt = optimiser() if way == "fresh state" else opt
        opt.zero_grad()
        F.mse_loss(layer(x), y).backward()
        opt.step()
        for name, p in layer.named_parameters():
            assert torch.equal(step["parameters"][name], p.detach()), (way, name)


def test_the_training_step_s_replay_builds_no_torch_optimiser():
    """Judging exercise 7 (in the student's kernel, for the visible check) never imports
    ``torch._dynamo``, which building a ``torch.optim`` optimiser does (about 70 MB)."""
    code = (
        "import sys\n"
        "from encoder_lib.grading.checks import n10_jax_encoder as n10\n"
        "case = next(n10._cases(False))\n"
        "o = case.call.options\n"
        "n10._replay(case.call.state, o['batches'], *o['hyper'])\n"
        "assert 'torch._dynamo' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_in_a_cell_the_release_waits_for_the_end_of_the_cell(monkeypatch):
    """In a kernel's cell the programs of a check are released when the cell ends (IPython's
    post_run_cell), not between the visible check and the hidden one of one test cell, which
    runs the same cases again; once, whatever the number of checks in the cell."""
    from IPython.core.events import EventManager, available_events

    released: list[str] = []
    monkeypatch.setattr(
        observe_jax, "_release_compiled", lambda: released.append(observe_jax._SERVING[0])
    )
    monkeypatch.setattr(observe_jax, "_SERVING", [""])
    monkeypatch.setattr(observe_jax, "_in_a_kernel", lambda: True)
    shell = type("Shell", (), {})()
    shell.events = EventManager(shell, available_events)
    monkeypatch.setattr(observe_jax, "_shell", lambda: shell)
    dropout = NOTEBOOK.namespace()["dropout"]

    n10_jax_encoder.check_jax_dropout(dropout)
    n10_jax_encoder.check_jax_dropout(dropout, thorough=True)
    assert released == ["jax_dropout"]  # the first call only: a new exercise
    assert shell.events.callbacks["post_run_cell"] == [observe_jax._after_the_cell]
    shell.events.trigger("post_run_cell", None)
    assert released == ["jax_dropout", ""]
    assert shell.events.callbacks["post_run_cell"] == []
    shell.events.trigger("post_run_cell", None)  # the next cell: nothing more to release
    assert released == ["jax_dropout", ""]


def test_in_a_kernel_compiled_programs_are_released_between_and_after_checks(monkeypatch):
    """In a notebook's kernel JAX's programs are let go when the calls move to another exercise
    and when a check made in the kernel ends (the demos below it start lighter); in any other
    process (this one) they are kept. Each release is recorded here instead of done."""
    released: list[str] = []
    monkeypatch.setattr(
        observe_jax, "_release_compiled", lambda: released.append(observe_jax._SERVING[0])
    )
    monkeypatch.setattr(observe_jax, "_SERVING", [""])
    namespace = NOTEBOOK.namespace()
    dropout, layer_norm = namespace["dropout"], namespace["LayerNorm"]

    n10_jax_encoder.check_jax_dropout(dropout)
    assert released == []  # not a kernel
    monkeypatch.setattr(observe_jax, "_in_a_kernel", lambda: True)
    n10_jax_encoder.check_jax_dropout(dropout)
    # on its first call (another exercise than none), and after the check
    assert released == ["jax_dropout", ""]
    with pytest.raises(runner.GradingError):
        n10_jax_encoder.check_jax_layer_norm(
            lambda *a, **k: None
        )  # not a module: fails, still released
    assert released == ["jax_dropout", "", "jax_layer_norm", ""]
    n10_jax_encoder.check_jax_layer_norm(layer_norm)
    # served by wire (autograde), calls of one exercise in a row release only when it changes
    before = len(released)
    ask = runner.local({"LayerNorm": layer_norm})
    exercise = runner.EXERCISES["test_jax_layer_norm"]
    for case in exercise.cases(False):
        ask(case.call)
    assert released[before:] == ["jax_layer_norm"]


def test_a_grading_kernel_keeps_its_programs_across_exercises(monkeypatch):
    """A grading kernel (its JAX cache read-only: a private copy of the instructor's) loads
    every program from the cache and lives for one notebook: moving to another exercise
    releases nothing, where the student's kernel would release."""
    released: list[str] = []
    monkeypatch.setattr(
        observe_jax, "_release_compiled", lambda: released.append(observe_jax._SERVING[0])
    )
    monkeypatch.setattr(observe_jax, "_SERVING", [""])
    monkeypatch.setattr(observe_jax, "_in_a_kernel", lambda: True)
    namespace = NOTEBOOK.namespace()
    ask = runner.local({"dropout": namespace["dropout"], "LayerNorm": namespace["LayerNorm"]})

    def serve_both() -> None:
        for name in ("test_jax_dropout", "test_jax_layer_norm"):
            ask(next(iter(runner.EXERCISES[name].cases(False))).call)

    monkeypatch.setenv(JAX_CACHE_READ_ONLY_VARIABLE, "1")
    serve_both()
    assert released == []
    monkeypatch.delenv(JAX_CACHE_READ_ONLY_VARIABLE)
    serve_both()
    assert released == ["jax_dropout", "jax_layer_norm"]
