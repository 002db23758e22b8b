"""What ``help()`` shows a self-learner: every module's own methods say what they do, and the
README's headline example says when its output is repeatable."""

from __future__ import annotations

import importlib
import inspect
import pydoc

import pytest
import torch
from torch import nn

import encoder_lib

# The modules of the encoder and the decoder (the newer modules are checked by their authors).
MODULES = ("attention", "decoder", "embeddings", "encoder", "feed_forward", "layer_norm", "model")
PYTORCH_BOILERPLATE = (
    "Define the computation performed at every call",  # nn.Module.forward's docstring
    "Initialize internal Module state",  # nn.Module.__init__'s
)


def _module_classes():
    for name in MODULES:
        module = importlib.import_module(f"encoder_lib.{name}")
        for public in module.__all__:
            obj = getattr(module, public)
            if inspect.isclass(obj) and issubclass(obj, nn.Module):
                yield pytest.param(obj, id=public)


@pytest.mark.parametrize("cls", list(_module_classes()))
def test_forward_and_init_have_their_own_docstrings(cls):
    for method in ("__init__", "forward"):
        assert method in vars(cls), f"{cls.__name__}.{method} is inherited"
        assert vars(cls)[method].__doc__, f"{cls.__name__}.{method} has no docstring"
    shown = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    defined_here = shown.split("Methods inherited from")[0]
    for boilerplate in PYTORCH_BOILERPLATE:
        assert boilerplate not in defined_here, f"help({cls.__name__}) shows {boilerplate!r}"


def test_sentence_encoder_repeats_in_eval_mode_only():
    """README's headline example: a new SentenceEncoder is in training mode (dropout: two calls
    differ); after .eval() the same sentence gives the same tensor. (A small one: the headline
    size takes seconds.)"""
    config = encoder_lib.EncoderConfig(
        d_model=32, num_heads=4, d_ff=64, num_layers=2, max_sequence_length=16
    )
    encoder = encoder_lib.SentenceEncoder(config=config)
    assert encoder.training
    assert not torch.equal(encoder(("Hi",)), encoder(("Hi",)))
    encoder = encoder.eval()
    assert torch.equal(encoder(("Hi",)), encoder(("Hi",)))
