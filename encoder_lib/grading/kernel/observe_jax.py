"""The kernel's side of notebook 10's checks: how a call is run on the student's JAX code and
observed, as ``observe`` does for PyTorch code (the ``"jax"`` scenario, run by ``wire.serve`` at
autograde and by the visible checks in the notebook).

A call arrives with torch tensors and a PyTorch state dict; ``options["setup"]`` says what the
target is: a function (``dropout``: called once per ``options["runs"]`` entry), a function that
fills an ``nnx.Linear`` (``load_linear``), or an NNX module class (built, given PyTorch's
weights with ``encoder_lib.jax_bridge``, called ``options["steps"]`` times). While a module runs,
the notebook's ``dropout`` is replaced by one that records every call (rate, ``deterministic``,
key, and the mask drawn from the key), so that the grader's PyTorch reference can apply the same
masks. The outputs go back as torch tensors. JAX and Flax are imported only inside these
functions: nbgrader's process, which builds the cases and judges, never imports them.

The checks in ``n10_jax_encoder`` say what is run, and register ``run_jax`` as the ``"jax"``
scenario and ``release_after_a_check`` with ``observe.after_each_check``; this module only runs
them.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from encoder_lib.course import JAX_CACHE_READ_ONLY_VARIABLE

from . import observe
from .observe import Call, Failure, Observation, Unfit, global_names, namespace_of


def run_jax(lookup: Callable[[str], Any], call: Call) -> Observation:
    """Run ``call`` on the student's JAX code: ``options["setup"]`` is ``"function"`` (call the
    target once per ``options["runs"]`` entry ``(key seed, deterministic)``), ``"linear"`` (hand
    it an ``nnx.Linear`` to fill) or ``"module"`` (build it, load ``state`` with
    ``jax_bridge.load_from_torch(..., options["layout"])``, call it ``options["steps"]`` times
    with ``deterministic = not call.train``)."""
    from flax import nnx  # JAX is imported only where this notebook runs

    if _SERVING[0] != call.exercise:  # a new exercise: a moment to release memory
        _SERVING[0] = call.exercise
        _release_if_in_a_kernel()
    target = observe.lookup_target(lookup, call.target)
    setup = call.options.get("setup", "function")
    is_nnx_class = isinstance(target, type) and issubclass(target, nnx.Module)
    kind = "nnx module class" if is_nnx_class else observe.kind_of(target)
    obs = Observation(info={"target": kind, "globals": global_names(target)})
    if (setup == "module") != is_nnx_class or not callable(target):
        return obs
    record: list[list[dict[str, Any]]] = []
    phase = "construct"
    with observe.student_mode(call.exercise, call.seed) as seen:
        try:
            recording = _recording_dropout(target, record) if setup == "module" else None
            with recording or contextlib.nullcontext():
                if setup == "function":
                    phase = "call"
                    value = _run_function(target, call)
                elif setup == "linear":
                    phase = "call"
                    value = _run_linear(target, call, obs)
                else:
                    module = target(
                        *_jax(call.init[0] if call.init else ()),
                        **_jax(dict(call.init[1]) if call.init else {}),
                        rngs=nnx.Rngs(params=call.seed, dropout=call.seed + 1),
                    )
                    obs.info["module"] = _describe(module)
                    if not isinstance(module, nnx.Module):
                        return obs
                    phase = "load"
                    _load(module, call)
                    phase = "call"
                    value = _run_module(module, call, record)
            obs.value, obs.info["tensors"] = observe.export_value(_torch(value))
        except Unfit as problem:
            obs.failure = Failure("missing", "", str(problem), phase) if not seen else None
        except Exception as error:  # anything the student's code raised is observed
            obs.failure = observe.failure_of(error, phase, seen)
        if seen and obs.failure is None:
            obs.failure = observe.seen_failure(seen[0], phase)
    obs.info["dropout"] = record
    # The student's code got JAX copies: nothing it does can change the tensors it was sent.
    obs.after = {n: t.clone() for n, t in observe.named_tensors(call.args, call.kwargs).items()}
    return obs


_SERVING = [""]
"""The exercise whose calls this kernel ran last."""


def _release_if_in_a_kernel() -> None:
    """Run eagerly, JAX compiles every operation for every new shape and keeps each program:
    the checks of notebook 10's six exercises compile about 160 (their cases share a few layer
    sizes and shapes for this reason: 350, then 241, before). So in a
    notebook's kernel (the student's, or the grader's at autograde) the programs are released
    whenever the calls move on to another exercise; not between the cases of one exercise,
    which share their shapes (clearing there compiled the same programs again: five times
    slower, measured). Measured on the solution's Run All (2026-11-27, quiet 2-core machine):
    the kernel peaks at 941 MB with the release and 1,123 MB without it; the release costs a
    graded notebook 13 s (its judged test cells: 29 s against 16 s). A process that checks many
    answers in a row (the course's tests) keeps them: it compiles what it needs once.

    A grading kernel keeps them too. It is told so by its read-only JAX cache (a private copy
    of the instructor's: ``encoder_lib.autograde.jax_cache``), lives for one notebook, and is
    not a Binder user's memory; every program it needs is in the cache, and loading released
    programs again was half of its test cells' time (measured 2026-11-29, load 1.2-1.5, a
    graded reference notebook 10 with every program found in the cache: test cells 7.7 s with
    the release, 3.9 s without; the kernel's peak 736-748 MB with it, 828-840 MB without)."""
    if _in_a_kernel() and os.environ.get(JAX_CACHE_READ_ONLY_VARIABLE) != "1":
        _release_compiled()


def release_after_a_check() -> None:
    """A check of notebook 10 has ended in the student's kernel: release its programs too, so
    that the demos below it start from the memory the setup cell left (the last exercise's
    programs were kept until the kernel ended: Run All peaked at 860 MB with JAX's cache filled).
    With the cache (``encoder_lib.course.use_jax_compilation_cache``) a released program that is
    needed again loads in about 25 ms.

    In a kernel the release waits for the end of the cell that made the check (IPython's
    ``post_run_cell``): a test cell that makes the visible check and then the hidden one (the
    source notebook, nbval, a graded notebook run in its kernel) runs the visible cases again
    and other cases of the same shapes, and finds every program the visible check compiled
    (released in between, they were all compiled or loaded again: notebook 10's test cells in a
    fresh kernel took 62-63 s against 33-41 s, 2026-11-29, a 2-core machine at load 11-15). A
    student's test cell holds one check: the release comes when it ends, as before."""
    if not _SERVING[0]:
        return
    shell = _shell() if _in_a_kernel() else None
    if shell is None:
        _SERVING[0] = ""
        _release_if_in_a_kernel()
        return
    if _after_the_cell not in shell.events.callbacks.get("post_run_cell", []):
        shell.events.register("post_run_cell", _after_the_cell)


def _after_the_cell(result: Any = None) -> None:
    """IPython's ``post_run_cell``: the cell that made a check has ended; release once."""
    shell = _shell()
    if shell is not None:
        with contextlib.suppress(ValueError):
            shell.events.unregister("post_run_cell", _after_the_cell)
    if _SERVING[0]:
        _SERVING[0] = ""
        _release_if_in_a_kernel()


def _shell() -> Any:
    """The running IPython shell, or None."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _in_a_kernel() -> bool:
    """Whether this process is a running IPython kernel (importing ``ipykernel`` is not enough:
    the test runner's plugins import parts of it)."""
    kernelapp = sys.modules.get("ipykernel.kernelapp")
    return kernelapp is not None and kernelapp.IPKernelApp.initialized()


def _release_compiled() -> None:
    """Forget the operations JAX compiled so far and give their memory back."""
    import jax

    jax.clear_caches()
    # glibc keeps freed memory in its arenas unless asked to return it; elsewhere (macOS) the
    # memory is reused rather than returned.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _jax(value: Any) -> Any:
    """torch tensors -> JAX arrays, inside tuples, lists and dicts."""
    from encoder_lib.jax_bridge import to_jax

    if isinstance(value, torch.Tensor):
        return to_jax(value)
    if isinstance(value, tuple | list):
        return type(value)(_jax(v) for v in value)
    if isinstance(value, dict):
        return {k: _jax(v) for k, v in value.items()}
    return value


def _torch(value: Any) -> Any:
    """JAX (and NumPy) arrays -> torch tensors, inside tuples and lists."""
    import jax
    import numpy as np

    if isinstance(value, jax.Array | np.ndarray):
        return torch.from_numpy(np.array(value))
    if isinstance(value, tuple | list):
        return type(value)(_torch(v) for v in value)
    return value


def _key_data(key: Any) -> torch.Tensor | None:
    """A key's bits as int64 (typed keys and legacy uint32 keys alike), or None."""
    import jax
    import numpy as np

    try:
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        return torch.from_numpy(np.asarray(key).astype(np.int64))
    except Exception:  # not a key: the reference dropout below will say so when it uses it
        return None


def _mask_from_key(bits: torch.Tensor, rate: float, shape: tuple[int, ...]) -> torch.Tensor:
    """A keep-mask that is a function of the key (the same key, the same mask), drawn by torch:
    ``jax.random.bernoulli`` compiles a program of about 0.8 s for every new shape, and the
    checks of exercises 3-6 met a dozen shapes in every fresh grading kernel (measured: 9 of its
    24 s of compilation). Which positions drop need not be JAX's: the reference applies the
    recorded mask, and the keys themselves are compared by ``_fresh_keys``."""
    digest = hashlib.blake2b(bits.numpy().tobytes(), digest_size=8).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
    return torch.rand(shape, generator=generator) >= rate


@contextlib.contextmanager
def _recording_dropout(target: Any, record: list[list[dict[str, Any]]]) -> Iterator[None]:
    """While the call runs, the notebook's ``dropout`` is the reference's, recording each call
    in ``record[-1]`` (one list per step of the module)."""
    import jax.numpy as jnp

    from encoder_lib.jax_bridge import to_jax

    namespace = namespace_of(target)
    if not isinstance(namespace, dict) or not callable(namespace.get("dropout")):
        yield
        return

    def dropout(x, rate, *args, **kwargs):
        named = dict(zip(("deterministic", "key"), args, strict=False)) | kwargs
        deterministic, key = bool(named.get("deterministic", False)), named.get("key")
        entry = {
            "rate": float(rate),
            "deterministic": deterministic,
            "shape": tuple(int(n) for n in x.shape),
            "key": _key_data(key),
            "mask": None,
        }
        if record:
            record[-1].append(entry)
        if deterministic or rate == 0.0:
            return x
        if entry["key"] is None:
            raise TypeError(
                f"dropout's key must be a JAX random key (jax.random.key(...) or "
                f"self.rngs.dropout()), not {type(key).__name__}"
            )
        entry["mask"] = _mask_from_key(entry["key"], rate, entry["shape"])
        return jnp.where(to_jax(entry["mask"]), x / (1.0 - rate), 0.0)

    original = namespace["dropout"]
    namespace["dropout"] = dropout
    try:
        yield
    finally:
        namespace["dropout"] = original


def _run_function(target: Any, call: Call) -> tuple[Any, ...]:
    import jax

    args, kwargs = _jax(call.args), _jax(dict(call.kwargs))
    return tuple(
        target(*args, **kwargs, deterministic=deterministic, key=jax.random.key(seed))
        for seed, deterministic in call.options["runs"]
    )


def _run_linear(target: Any, call: Call, obs: Observation) -> tuple[Any, Any]:
    from flax import nnx

    d_in, d_out, use_bias = call.options["linear"]
    layer = nnx.Linear(d_in, d_out, use_bias=use_bias, rngs=nnx.Rngs(call.seed))
    obs.info["before"] = _torch((layer.kernel[...], layer.bias[...] if use_bias else None))
    variables = {"kernel": layer.kernel, "bias": layer.bias if use_bias else None}
    target(layer, *_jax(call.args))
    # what each variable is after the call: "same" (written in place), "new Param", or the
    # class of what replaced it (a plain array is no parameter: no optimiser would train it)
    obs.info["variables"] = {
        name: "same" if getattr(layer, name, None) is before
        else "new Param" if isinstance(getattr(layer, name, None), nnx.Param)
        else _kind(getattr(layer, name, None))
        for name, before in variables.items()
        if before is not None
    }  # fmt: skip
    return layer.kernel[...], (layer.bias[...] if use_bias else None)


def _load(module: Any, call: Call) -> None:
    from encoder_lib.jax_bridge import load_from_torch

    if call.state is None:
        return
    try:
        load_from_torch(module, call.state, call.options["layout"])
    except (AttributeError, TypeError, KeyError, ValueError) as problem:
        raise Unfit(
            f"PyTorch's weights cannot be written into {type(module).__name__}: {problem}. "
            "Keep the given __init__ and its attribute names."
        ) from None


def _run_module(module: Any, call: Call, record: list[list[dict[str, Any]]]) -> Any:
    args, kwargs = _jax(call.args), _jax(dict(call.kwargs))
    if call.options.get("plain_call"):  # a module without dropout (LayerNorm): module(x)
        return module(*args, **kwargs)
    outputs = []
    for _ in range(call.options.get("steps", 1)):
        record.append([])
        outputs.append(module(*args, **kwargs, deterministic=not call.train))
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _describe(module: Any) -> dict[str, Any]:
    """``describe_module``'s facts for an NNX module: parameters by dotted path (their initial
    values), sub-modules by path and class."""
    from flax import nnx

    facts: dict[str, Any] = {"type": type(module).__qualname__}
    facts["is_module"] = isinstance(module, nnx.Module)
    if facts["is_module"]:
        params = nnx.to_flat_state(nnx.state(module, nnx.Param))
        facts["parameters"] = {
            ".".join(str(p) for p in path): _torch(_array(v)) for path, v in params
        }
        facts["submodules"] = {
            ".".join(str(p) for p in path): f"{type(m).__module__}.{type(m).__qualname__}"
            for path, m in module.iter_modules()
            if path
        }
        # arrays held outside nnx.Param (a plain array, another kind of Variable): no parameter
        facts["not_parameters"] = {
            ".".join(str(p) for p in (*path, name)): _kind(v)
            for path, m in module.iter_modules()
            for name, v in vars(m).items()
            if not name.startswith("_") and _not_a_parameter(v)
        }
    facts["attrs"] = {}
    return facts


def _not_a_parameter(value: Any) -> bool:
    import jax
    from flax import nnx

    if isinstance(value, nnx.Variable):
        return not isinstance(value, nnx.Param | nnx.RngState)
    return isinstance(value, jax.Array)


def _kind(value: Any) -> str:
    """How a message names what holds an array: a plain jax array, an ``nnx.`` Variable kind,
    or another class."""
    import jax
    from flax import nnx

    if isinstance(value, jax.Array):
        return "a plain jax array"
    if isinstance(value, nnx.Variable):
        return f"nnx.{type(value).__name__}"
    return f"a {type(value).__name__}"


def _array(variable: Any) -> Any:
    getter = getattr(variable, "get_value", None)
    return getter() if getter is not None else variable[...]
