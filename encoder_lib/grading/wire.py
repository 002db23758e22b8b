"""How a ``Call`` travels into the student's kernel and its ``Observation`` comes back.

A message is JSON for the structure and one safetensors buffer for the tensors (raw bytes with
dtype and shape: no pickle, so decoding runs no code of the sender's). Tensors appear in the
JSON as ``{"t": key}``; one tensor used twice is sent once and comes back as one object, so
self-attention's ``(x, x, x)`` stays one tensor. The grader decodes what a kernel sends with
limits (size, depth, count) and rejects anything it does not expect. ``serve`` is the kernel's
end: the grader runs it in the student's kernel to answer a request.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

import safetensors
import safetensors.torch
import torch

from .kernel.observe import Call, Failure, Observation, Opaque, Part, observe

__all__ = [
    "MIME",
    "WireError",
    "encode_calls",
    "decode_calls",
    "encode_observations",
    "decode_observations",
    "encode_call",
    "decode_call",
    "encode_observation",
    "decode_observation",
    "serve",
]

MIME = "application/vnd.encoder-lab.observation+json"
"""The display-data type a kernel answers with."""

MAX_BYTES = 64 * 2**20
MAX_DEPTH = 32
MAX_NODES = 100_000

_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
              torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
}  # fmt: skip


class WireError(ValueError):
    """A message that is not what the protocol allows."""


# --- values <-> JSON + tensors -------------------------------------------------------------------


class _Packer:
    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._keys: dict[int, str] = {}

    def pack(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            key = self._keys.get(id(v))
            if key is None:
                key = self._keys[id(v)] = str(len(self.tensors))
                with torch._C.DisableTorchFunctionSubclass():
                    self.tensors[key] = v.detach().cpu().contiguous().clone()
            return {"t": key}
        if v is None or type(v) in (bool, int, str):
            return v
        if type(v) is float:
            return v if math.isfinite(v) else {"float": repr(v)}
        if isinstance(v, torch.dtype):
            return {"dtype": str(v).removeprefix("torch.")}
        if isinstance(v, tuple):
            return {"tuple": [self.pack(x) for x in v]}
        if isinstance(v, list):
            return {"list": [self.pack(x) for x in v]}
        if isinstance(v, Mapping):
            return {"dict": {str(k): self.pack(x) for k, x in v.items()}}
        if isinstance(v, Part):
            return {
                "part": v.kind,
                "tensors": self.pack(v.tensors),
                "options": self.pack(v.options),
            }
        if isinstance(v, Opaque):
            return {"opaque": v.type}
        raise WireError(f"cannot send a {type(v).__qualname__}")

    def message(self, body: Any) -> str:
        blob = safetensors.torch.save(self.tensors) if self.tensors else b""
        return json.dumps({"body": body, "tensors": base64.b64encode(blob).decode("ascii")})


class _Unpacker:
    def __init__(self, message: str):
        if not isinstance(message, str) or len(message) > MAX_BYTES:
            raise WireError("the message is not a string of acceptable size")
        try:
            data = json.loads(message)
            blob = base64.b64decode(data["tensors"], validate=True)
            self.tensors = safetensors.torch.load(blob) if blob else {}
        except (ValueError, KeyError, TypeError, safetensors.SafetensorError) as e:
            raise WireError(f"unreadable message: {e}") from None
        self.body = data.get("body")
        self.nodes = 0

    def unpack(self, v: Any, depth: int = 0) -> Any:
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            raise WireError("the message is nested too deeply or too large")
        if v is None or type(v) in (bool, int, float, str):
            return v
        if type(v) is list:
            raise WireError("a bare list")
        if type(v) is not dict or len(v) not in (1, 3):
            raise WireError("an unexpected value")
        if "t" in v:
            key = v["t"]
            if type(key) is not str or key not in self.tensors:
                raise WireError("a reference to a missing tensor")
            return self.tensors[key]
        if "float" in v:
            text = v["float"]
            if text not in ("nan", "inf", "-inf"):
                raise WireError("a bad float")
            return float(text)
        if "dtype" in v:
            if v["dtype"] not in _DTYPES:
                raise WireError("an unknown dtype")
            return _DTYPES[v["dtype"]]
        if "tuple" in v or "list" in v:
            items = v.get("tuple", v.get("list"))
            if type(items) is not list:
                raise WireError("a bad sequence")
            out = [self.unpack(x, depth + 1) for x in items]
            return tuple(out) if "tuple" in v else out
        if "dict" in v:
            if type(v["dict"]) is not dict:
                raise WireError("a bad mapping")
            return {str(k): self.unpack(x, depth + 1) for k, x in v["dict"].items()}
        if "part" in v:
            tensors, options = (
                self.unpack(v["tensors"], depth + 1),
                self.unpack(v["options"], depth + 1),
            )
            if type(v["part"]) is not str or type(tensors) is not dict or type(options) is not dict:
                raise WireError("a bad part")
            return Part(v["part"], tensors, options)
        if "opaque" in v:
            return Opaque(str(v["opaque"]))
        raise WireError("an unexpected value")


# --- calls and observations ----------------------------------------------------------------------


_CALL_FIELDS = {f.name for f in fields(Call)}
_OBSERVATION_FIELDS = {"value", "failure", "after", "grads", "info"}


def encode_calls(calls: list[Call]) -> str:
    """One message for several calls (the grader sends an exercise's cases at once)."""
    packer = _Packer()
    return packer.message(packer.pack([{f: getattr(c, f) for f in _CALL_FIELDS} for c in calls]))


def decode_calls(message: str) -> list[Call]:
    unpacker = _Unpacker(message)
    body = unpacker.unpack(unpacker.body)
    if type(body) is not list or not all(type(b) is dict and set(b) == _CALL_FIELDS for b in body):
        raise WireError("not a list of calls")
    return [Call(**b) for b in body]


def encode_observations(observations: list[Observation]) -> str:
    packer = _Packer()
    body = [
        {
            "value": obs.value,
            "failure": None if obs.failure is None else asdict(obs.failure),
            "after": obs.after,
            "grads": obs.grads,
            "info": obs.info,
        }
        for obs in observations
    ]
    return packer.message(packer.pack(body))


def decode_observations(message: str) -> list[Observation]:
    """The ``Observation``s in a kernel's message; ``WireError`` for anything malformed."""
    unpacker = _Unpacker(message)
    body = unpacker.unpack(unpacker.body)
    if type(body) is not list:
        raise WireError("not a list of observations")
    return [_observation(b) for b in body]


def _observation(body: Any) -> Observation:
    if type(body) is not dict or set(body) != _OBSERVATION_FIELDS:
        raise WireError("not an observation")
    failure = body["failure"]
    if failure is not None:
        names = {f.name for f in fields(Failure)}
        if type(failure) is not dict or set(failure) != names:
            raise WireError("a bad failure")
        if not all(v is None or type(v) is str for v in failure.values()):
            raise WireError("a bad failure")
        failure = Failure(**failure)
    after, grads, info = body["after"], body["grads"], body["info"]
    if type(after) is not dict or not all(isinstance(t, torch.Tensor) for t in after.values()):
        raise WireError("bad inputs after the call")
    if type(grads) is not dict or not all(
        t is None or isinstance(t, torch.Tensor) for t in grads.values()
    ):
        raise WireError("bad gradients")
    if type(info) is not dict:
        raise WireError("bad facts")
    return Observation(body["value"], failure, after, grads, info)


def encode_call(call: Call) -> str:
    return encode_calls([call])


def decode_call(message: str) -> Call:
    (call,) = _one(decode_calls(message))
    return call


def encode_observation(obs: Observation) -> str:
    return encode_observations([obs])


def decode_observation(message: str) -> Observation:
    (obs,) = _one(decode_observations(message))
    return obs


def _one(items: list) -> list:
    if len(items) != 1:
        raise WireError(f"expected one item, got {len(items)}")
    return items


# --- the kernel's end ----------------------------------------------------------------------------


def serve(request: str) -> None:
    """Answer one request from the grader (``encoder_lib.autograde.kernel_ask``): decode the
    ``Call``s, observe each in this kernel's namespace, publish the encoded ``Observation``s as
    display data. Runs in the student's kernel; the grader trusts nothing it says beyond data."""
    from IPython import get_ipython
    from IPython.display import publish_display_data

    try:
        namespace = get_ipython().user_ns
        observations = [observe(namespace.__getitem__, call) for call in decode_calls(request)]
    except Exception as error:  # a request this kernel cannot run is an answer too
        observations = [Observation(failure=Failure("no answer", type(error).__name__, str(error)))]
    publish_display_data({MIME: encode_observations(observations)})
