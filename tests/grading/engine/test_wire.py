"""What crosses between the grader and the student's kernel: calls go in, observations come
back, as JSON and raw tensors. Decoding a kernel's message must never run code of the sender's
and must refuse anything the protocol does not allow."""

from __future__ import annotations

import base64
import json
import math
import pickle

import pytest
import safetensors.torch
import torch

from encoder_lib.grading import GradingError, runner, wire
from encoder_lib.grading.kernel.observe import Call, Failure, Observation, Opaque, Part, observe


def _call() -> Call:
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    return Call(
        "residual_block",
        "residual_block",
        (x, Part("residual.sublayer", {"weight": torch.eye(4), "shift": torch.zeros(4)}), x),
        {"norm_first": True, "eps": 1e-5, "mask": torch.tensor([[True, False]])},
        init=((4,), {"dropout": 0.5, "activation": "gelu"}),
        dtype=torch.float32,
        state={"weight": torch.ones(4)},
        train=True,
        grad=("args[0]", "parameters"),
        upstream=(torch.ones(2, 3, 4),),
        inspect=True,
        attrs=("eps",),
        options={"shapes": [(1, 2), (3,)], "nan": float("nan")},
        seed=7,
    )


def test_several_calls_travel_in_one_message_and_come_back_in_order():
    calls = [_call(), Call("f", "f", (torch.ones(2),)), Call("g", "g")]
    back = wire.decode_calls(wire.encode_calls(calls))
    assert [c.target for c in back] == ["residual_block", "f", "g"]
    observations = [Observation(value=i) for i in range(3)]
    assert [o.value for o in wire.decode_observations(wire.encode_observations(observations))] == [
        0,
        1,
        2,
    ]
    with pytest.raises(wire.WireError, match="one"):
        wire.decode_call(wire.encode_calls(calls))


def test_a_call_survives_the_trip_and_keeps_one_tensor_used_twice():
    call = _call()
    back = wire.decode_call(wire.encode_call(call))
    assert back.target == call.target and back.exercise == call.exercise
    assert back.args[0] is back.args[2], "self-attention's (x, x, x) must stay one tensor"
    torch.testing.assert_close(back.args[0], call.args[0])
    assert back.args[0].dtype == torch.float64
    assert isinstance(back.args[1], Part) and back.args[1].kind == "residual.sublayer"
    torch.testing.assert_close(back.args[1].tensors["weight"], torch.eye(4))
    assert back.kwargs["norm_first"] is True and back.kwargs["eps"] == 1e-5
    assert back.kwargs["mask"].dtype == torch.bool
    assert back.init == ((4,), {"dropout": 0.5, "activation": "gelu"})
    assert back.dtype is torch.float32 and back.train is True and back.seed == 7
    assert back.grad == ("args[0]", "parameters") and back.attrs == ("eps",)
    assert back.options["shapes"] == [(1, 2), (3,)]
    assert back.options["nan"] != back.options["nan"]  # NaN survives as NaN


def test_an_observation_survives_the_trip():
    weights = torch.rand(2, 2, dtype=torch.float32)
    obs = Observation(
        value=(torch.zeros(3), weights, 5, None, Opaque("builtins.object")),
        failure=Failure("error", "RuntimeError", "boom", "call", "Cell In[3], line 2, in f", "f"),
        after={"args[0]": torch.ones(2)},
        grads={"args[0]": torch.ones(2), "parameters.w": None},
        info={"tensors": {"[0]": {"requires_grad": True}}, "parts": [1, 2]},
    )
    back = wire.decode_observation(wire.encode_observation(obs))
    assert isinstance(back.value, tuple) and len(back.value) == 5
    torch.testing.assert_close(back.value[1], weights)
    assert back.value[2] == 5 and back.value[3] is None
    assert back.value[4] == Opaque("builtins.object")
    assert back.failure == obs.failure
    assert back.grads["parameters.w"] is None
    assert back.info == obs.info


def test_what_a_real_call_observes_survives_the_trip():
    def layer_norm(x, weight, bias, eps=1e-5):
        var, mean = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps) * weight + bias

    x = torch.randn(2, 3, 4, dtype=torch.float64)
    call = Call("layer_norm", "layer_norm", (x, torch.ones(4), torch.zeros(4)))
    obs = observe({"layer_norm": layer_norm}.__getitem__, call)
    back = wire.decode_observation(wire.encode_observation(obs))
    torch.testing.assert_close(back.value, obs.value)
    assert back.info["target"] == "function"


def _message(body, tensors: bytes = b"") -> str:
    return json.dumps({"body": body, "tensors": base64.b64encode(tensors).decode()})


@pytest.mark.parametrize(
    "message",
    [
        "not json",
        json.dumps({"body": None}),  # no tensors field
        _message({"dict": {"value": {"t": "7"}}}),  # a tensor that was not sent
        _message({"dict": {"value": {"exec": "print(1)"}}}),  # an unknown node
        _message({"dict": {"value": [1, 2]}}),  # a bare list
        _message({"dict": {"value": {"float": "1e400"}}}),  # only nan/inf travel as text
        _message({"dict": {"value": {"dtype": "object"}}}),
        _message({"dict": {"value": None}}),  # an observation lacks its other fields
        _message({"tuple": []}, pickle.dumps(torch.zeros(2))),  # pickle is not safetensors
        _message(json.loads(json.dumps({"tuple": []})) | {"extra": 1}),
    ],
)
def test_malformed_observations_are_refused(message):
    with pytest.raises(wire.WireError):
        wire.decode_observation(message)


def test_deep_nesting_and_huge_messages_are_refused():
    node: object = None
    for _ in range(wire.MAX_DEPTH + 5):
        node = {"tuple": [node]}
    body = {"dict": {"value": node, "failure": None, "after": {"dict": {}}, "grads": {"dict": {}}}}
    body["dict"]["info"] = {"dict": {}}
    with pytest.raises(wire.WireError, match="deeply"):
        wire.decode_observation(_message(body))
    with pytest.raises(wire.WireError, match="size"):
        wire.decode_observation("x" * (wire.MAX_BYTES + 1))


def test_a_failure_with_fields_of_the_wrong_type_is_refused():
    failure = {"kind": "error", "error": 3, "message": "", "phase": "call", "where": None}
    failure["function"] = None
    packed = {k: v for k, v in failure.items()}
    body = {"dict": {"value": None, "failure": {"dict": packed}, "after": {"dict": {}}}}
    body["dict"] |= {"grads": {"dict": {}}, "info": {"dict": {}}}
    with pytest.raises(wire.WireError, match="failure"):
        wire.decode_observation(_message({"list": [body]}))


def test_tensors_come_back_as_plain_tensors_whatever_was_sent():
    class Sneaky(torch.Tensor):
        pass

    blob = safetensors.torch.save({"0": torch.zeros(2)})
    body = {"dict": {"value": {"t": "0"}, "failure": None, "after": {"dict": {}}}}
    body["dict"] |= {"grads": {"dict": {}}, "info": {"dict": {}}}
    back = wire.decode_observation(_message({"list": [body]}, blob))
    assert type(back.value) is torch.Tensor
    obs = Observation(value=torch.zeros(2).as_subclass(Sneaky))
    assert type(wire.decode_observation(wire.encode_observation(obs)).value) is torch.Tensor


def test_the_cascade_message_and_the_spared_rejudge_work_through_the_wire(monkeypatch):
    """At autograde the calls travel to the kernel: the names an answer calls (which earlier
    exercise to blame) and a substituted reference (``SPARE_DEPENDENTS``) go through too."""
    namespace = {"torch": torch, "math": math, "__name__": "__main__"}
    exec(
        "def attention_scores(query, key):\n"
        "    return query @ key.transpose(-2, -1) / query.shape[-1]\n\n"
        "def masked_softmax(scores, mask=None):\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    return torch.softmax(scores, dim=-1).nan_to_num(0.0)\n\n"
        "def scaled_dot_product_attention(query, key, value, mask=None):\n"
        "    weights = masked_softmax(attention_scores(query, key), mask)\n"
        "    return weights @ value, weights\n",
        namespace,
    )

    def remote(call: Call) -> Observation:  # the grader's side, then the kernel's, and back
        (received,) = wire.decode_calls(wire.encode_calls([call]))
        obs = observe(namespace.__getitem__, received)
        (back,) = wire.decode_observations(wire.encode_observations([obs]))
        return back

    exercise = runner.EXERCISES["test_scaled_dot_product_attention"]
    with pytest.raises(GradingError, match=r"^.*this comes from your attention_scores"):
        runner.run(exercise, remote, thorough=True)
    monkeypatch.setattr(runner, "SPARE_DEPENDENTS", True)
    runner.run(exercise, remote, thorough=True)  # right once attention_scores is the reference
    with pytest.raises(GradingError, match="divided by d_k"):
        runner.run(runner.EXERCISES["test_attention_scores"], remote, thorough=True)


def test_the_localisation_works_through_the_wire():
    """The traced call travels to the kernel and its record of the sub-modules' calls comes
    back: a decoder layer whose cross-attention reads the decoder's stream as keys and values is
    named as it is in the notebook, catalogue off."""
    import dataclasses

    from grading.notebook_namespace import SolutionNotebook

    notebook = SolutionNotebook("07_decoder")
    source = notebook.source("decoder_layer")
    wrong = source.replace("self.multihead_attn(h, memory, memory", "self.multihead_attn(h, h, h")
    assert wrong != source
    namespace = notebook.namespace({"decoder_layer": wrong})

    def remote(call: Call) -> Observation:
        (received,) = wire.decode_calls(wire.encode_calls([call]))
        obs = observe(namespace.__getitem__, received)
        (back,) = wire.decode_observations(wire.encode_observations([obs]))
        return back

    exercise = runner.EXERCISES["test_decoder_layer"]
    case = dataclasses.replace(next(iter(exercise.cases(False))), mistakes=None, probes=())
    with pytest.raises(GradingError) as failed:
        runner.judge(case, remote(case.call), remote)
    assert failed.value.mistake == "part-input"
    assert "self.multihead_attn gets as key what self.norm1 returns" in str(failed.value)
