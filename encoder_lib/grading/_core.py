"""The machinery every check shares: failures that name the mistake, traps for the built-ins an
exercise forbids, and a snapshot that notices when the notebook has rebound torch or encoder_lib.

How a check works: build inputs with a private generator, compute the expected value with
``encoder_lib`` (the reference) and, where a classic mistake has a recognisable output, the value
that mistake would give; then call the student's code inside ``student_call`` and compare with
``expect_close``, which names the matching mistake when there is one.

Integrity (nbgrader is not a sandbox; these are the defences, tested in tests/grading):
- ``encoder_lib.grading`` is imported by a locked setup cell before any student cell runs; at
  import it captures a snapshot of torch's, ``torch.nn.functional``'s, ``torch.Tensor``'s,
  ``torch.testing``'s, ``encoder_lib``'s and a few builtins' attributes. Every check first
  verifies that nothing in the snapshot was rebound (``torch.allclose = ...``, monkeypatching
  ``F.scaled_dot_product_attention`` or ``encoder_lib.LayerNorm.forward``) and refuses to grade
  if something was. It also refuses while a ``TorchFunctionMode`` or ``TorchDispatchMode`` is left
  active, when a snapshotted attribute was already a fake written in the notebook when grading
  loaded, and when the comparisons the checks rely on (captured at import) cannot tell different
  tensors apart.
- The grading modules and ``encoder_lib`` itself refuse attribute assignment, so a checker
  cannot be replaced by ``grading.check_x = lambda *a: None``.
- Student outputs must be exactly ``torch.Tensor`` (a subclass could lie in
  ``__torch_function__``).
- While the student's code runs, calls to the built-ins that do the exercise's work
  (``F.scaled_dot_product_attention``, ``F.layer_norm``, ``encoder_lib``'s own answer...) raise
  ``ForbiddenCallError``.

Every public ``check_*`` is decorated with ``guarded``: it verifies the above before computing
anything and runs the whole check on one torch thread (``one_thread``). Checks that build modules
or use dropout draw from a private random stream (``seeded``), never the notebook's.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import math
import os
import sys
import sysconfig
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
import torch.testing
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = [
    "GradingError",
    "ForbiddenCallError",
    "TamperingError",
    "verify_untouched",
    "guarded",
    "one_thread",
    "seeded",
    "student_call",
    "innermost_function",
    "expect_tensor",
    "expect_shape",
    "expect_dtype",
    "expect_close",
    "randn",
    "generator",
    "keep_first",
]


from .feedback import ForbiddenCallError, GradingError


class TamperingError(GradingError):
    """The notebook rebound part of torch or encoder_lib; grading is refused."""


# --- references captured at import, before any student cell can run -----------------------------

_is = builtins.id  # identity through the id of the captured builtins, not `is` on rebindable names
_type = builtins.type
_isinstance = builtins.isinstance
_Tensor = torch.Tensor
_allclose = torch.allclose
_equal = torch.equal
_getprofile = sys.getprofile
_setprofile = sys.setprofile
_get_num_threads = torch.get_num_threads
_set_num_threads = torch.set_num_threads
_function_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack

_BUILTIN_NAMES = (
    "type isinstance issubclass getattr setattr hasattr len abs max min float int bool sum any "
    "all range zip iter next callable id repr str print open compile exec eval __import__"
).split()


def _public_attrs(owner: Any) -> Iterator[tuple[str, Any]]:
    for name, value in list(vars(owner).items()):
        if not name.startswith("__") or name in ("__call__", "__matmul__", "__init__"):
            yield name, value


def _snapshot_targets() -> list[Any]:
    import encoder_lib

    owners: list[Any] = [torch, F, _Tensor, torch.testing, torch.linalg, torch.special, math]
    owners += [
        cls for cls in vars(nn).values() if _isinstance(cls, type) and issubclass(cls, nn.Module)
    ]
    lib_modules = [m for name, m in sys.modules.items() if name.startswith("encoder_lib") and m]
    owners += lib_modules
    owners += [v for v in vars(encoder_lib).values() if _isinstance(v, type)]
    return owners


def _take_snapshot() -> list[tuple[Any, str, int]]:
    entries = [(builtins, name, _is(getattr(builtins, name))) for name in _BUILTIN_NAMES]
    for owner in _snapshot_targets():
        for name, value in _public_attrs(owner):
            if _isinstance(value, types.ModuleType):
                continue
            entries.append((owner, name, _is(value)))
    return entries


_SNAPSHOT: list[tuple[Any, str, int]] = []
_KEEP_ALIVE: list[Any] = []  # ids are only unique while the objects live
_FOREIGN: list[str] = []  # snapshotted attributes that were already fakes when grading loaded

# Where genuine code lives: the standard library, installed packages, encoder_lib. Code typed in
# a notebook lives elsewhere (ipykernel's temporary files, "<ipython-input-...>", "<string>").
_TRUSTED_DIRS = tuple(
    {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
)


def _is_foreign(value: Any) -> bool:
    """Whether ``value`` was made by code outside the trusted directories (e.g. in the notebook):
    a function written there, or an instance of a class written there."""
    func = getattr(value, "__func__", value)
    code = getattr(func, "__code__", None)
    if _isinstance(code, types.CodeType):
        if getattr(func, "__module__", None) == "__main__":
            return True
        if code.co_filename.startswith("<"):  # generated by exec, e.g. a dataclass __init__
            return getattr(func, "__module__", None) not in sys.modules
        return not os.path.abspath(code.co_filename).startswith(_TRUSTED_DIRS)
    cls = value if _isinstance(value, type) else _type(value)
    module = sys.modules.get(getattr(cls, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is None or module.__name__ == "__main__":
        return True
    return path is not None and not os.path.abspath(path).startswith(_TRUSTED_DIRS)


def take_snapshot() -> None:
    """Record the current torch/encoder_lib attributes; called once when grading is imported.

    A student cell placed *above* the setup cell runs before this, so attributes are also checked
    for being genuine: a torch or encoder_lib attribute whose code was written in the notebook is
    recorded as foreign, and every check then refuses to grade."""
    _SNAPSHOT[:] = _take_snapshot()
    _KEEP_ALIVE[:] = [getattr(owner, name, None) for owner, name, _ in _SNAPSHOT]
    _FOREIGN[:] = [
        f"{getattr(owner, '__name__', repr(owner))}.{name}"
        for (owner, name, _), value in zip(_SNAPSHOT, _KEEP_ALIVE, strict=True)
        if owner is not builtins and _is_foreign(value)
    ]


def verify_untouched(comparisons: bool = True) -> None:
    """Raise ``TamperingError`` naming the first active override, rebound attribute or dishonest
    comparison, if any.

    The comparisons are tested once nothing was rebound since the snapshot, and before the
    attributes that were already fakes when it was taken: a ``torch.allclose`` rebound above the
    setup cell is reported as what it does. ``comparisons=False`` skips that self-test, which
    ``guarded`` runs once per check (``student_call`` verifies the rest around every call)."""
    if _function_modes() or _dispatch_modes():
        raise TamperingError(
            "A TorchFunctionMode or TorchDispatchMode is active in this notebook (entered and "
            "never left): it can change what every torch function returns, so grading refuses "
            "to run. Restart the kernel and remove the code that enters it."
        )
    for owner, name, ident in _SNAPSHOT:
        namespace = vars(owner)
        if name not in namespace or _is(namespace[name]) != ident:
            where = getattr(owner, "__name__", repr(owner))
            raise TamperingError(
                f"{where}.{name} was replaced or deleted in this notebook. Grading compares your "
                "work with the real torch and encoder_lib, so it refuses to run. Restart the "
                "kernel and remove the cell that rebinds it."
            )
    foreign = (
        f"{_FOREIGN[0]} was replaced by code from this notebook before grading was loaded."
        if _FOREIGN
        else ""
    )
    if comparisons and not _comparisons_are_honest():
        raise TamperingError(
            "torch's comparison functions give wrong answers in this notebook (were they rebound "
            "in a cell run before the setup cell?), so grading refuses to run. Restart the "
            "kernel and run the notebook from the setup cell."
            + (f" ({foreign})" if foreign else "")
        )
    if foreign:
        raise TamperingError(
            f"{foreign} Grading compares your work with the real torch and encoder_lib, so it "
            "refuses to run. Restart the kernel and remove the cell that rebinds it."
        )


def _read_only_modules() -> Callable[[types.ModuleType], None]:
    """Make ``make_read_only``. The attributes a module had when it was frozen are kept in this
    closure, out of the notebook's reach, and attribute reads come from there: rebinding
    (``grading.check_x = ...``), writing into the module's ``__dict__`` or deleting changes
    nothing that ``grading.check_x`` returns."""
    frozen: dict[int, dict[str, Any]] = {}
    read = types.ModuleType.__getattribute__

    class _ReadOnlyModule(types.ModuleType):
        def __getattribute__(self, name: str) -> Any:
            saved = frozen.get(_is(self))
            if saved is not None and name in saved:
                return saved[name]
            return read(self, name)

        def __setattr__(self, name: str, value: Any) -> None:
            if name == "__class__" or name in frozen.get(_is(self), ()):
                raise AttributeError(
                    f"{self.__name__}.{name} is read-only while grading is loaded: the course's "
                    "reference and checkers cannot be replaced"
                )
            super().__setattr__(name, value)  # new names: the import system adds submodules

        def __delattr__(self, name: str) -> None:
            raise AttributeError(f"{self.__name__}.{name} is read-only while grading is loaded")

    def make_read_only(module: types.ModuleType) -> None:
        module.__class__ = _ReadOnlyModule
        frozen[_is(module)] = dict(vars(module))

    return make_read_only


make_read_only = _read_only_modules()


def _comparisons_are_honest() -> bool:
    """Whether the comparisons the checks rely on (captured at import) tell different tensors
    apart: a cell run before the setup cell could have rebound them before grading captured
    them."""
    try:
        zeros = torch.zeros(3, dtype=torch.float64)
        ones = torch.ones(3, dtype=torch.float64)
        honest = (
            _close(zeros, zeros.clone())
            and not _close(zeros, ones)
            and _equal(zeros, zeros.clone())
            and not _equal(zeros, ones)
        )
        try:
            expect_close(zeros, ones, "the self-test")
            honest = False
        except GradingError:
            pass
        return bool(honest)
    except Exception:  # the self-test itself broke: as untrustworthy as a wrong answer
        return False


# --- how every check runs ------------------------------------------------------------------------

_Check = TypeVar("_Check", bound=Callable[..., None])


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread meanwhile. The checks' tensors are tiny, and on a busy
    2-core machine (nbgrader grading in parallel, Binder) torch's thread pool made every small
    operation wait for a time slice: checks took ten to twenty times longer."""
    threads = _get_num_threads()
    _set_num_threads(1)
    try:
        yield
    finally:
        _set_num_threads(threads)


def guarded(check: _Check) -> _Check:
    """Decorate a public ``check_*``: refuse to grade (``TamperingError``) before computing
    anything when ``verify_untouched`` objects, and run the whole check on ``one_thread``."""

    @functools.wraps(check)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        verify_untouched()
        with one_thread():
            return check(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def seeded(seed: int | None = None) -> Iterator[None]:
    """Leave the notebook's random state untouched: torch's global CPU generator is forked
    meanwhile (and seeded with ``seed``, when given, for reproducible modules and dropout)."""
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        yield


# --- traps for forbidden built-ins ---------------------------------------------------------------


class _ForbidTorch(TorchFunctionMode):
    def __init__(self, forbidden: Mapping[Any, str], exercise: str):
        super().__init__()
        self.forbidden = {_is(f): name for f, name in forbidden.items()}
        self.exercise = exercise
        self.violation: str | None = None

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        name = self.forbidden.get(_is(func))
        if name is not None:
            self.violation = self.violation or name
            raise ForbiddenCallError(_forbidden_message(self.exercise, name))
        return func(*args, **(kwargs or {}))


def _forbidden_message(exercise: str, name: str) -> str:
    return (
        f"{exercise} calls {name}, which already does what this exercise asks you to write, so "
        "it earns no points. Write it yourself from basic tensor operations (matmul, softmax, "
        "mean, ...); you may use it afterwards to check your answer."
    )


@contextlib.contextmanager
def student_call(
    exercise: str,
    forbidden_torch: Mapping[Any, str] | None = None,
    forbidden_python: Iterable[Callable] = (),
) -> Iterator[None]:
    """Run the student's code for ``exercise`` with its forbidden built-ins trapped.

    ``forbidden_torch`` maps torch functions (``F.layer_norm``...) to the name shown in the
    message; they are trapped with a ``TorchFunctionMode``, which also sees calls made through
    ``nn.LayerNorm`` or aliases. ``forbidden_python`` lists Python functions or classes (e.g.
    ``encoder_lib.LayerNorm``) whose code must not run; a profiler hook watches for their code
    objects. Warnings are silenced (nbgrader scores any stderr output 0) and any exception other
    than a ``GradingError`` becomes a ``GradingError`` that says where it came from (an
    unreplaced stub: "is not written yet"). Torch runs on ``one_thread`` meanwhile.
    """
    verify_untouched(comparisons=False)
    codes: dict[Any, str] = {}
    for obj in forbidden_python:
        for fn in _functions_of(obj):
            codes[fn.__code__] = f"{obj.__module__}.{obj.__qualname__}"
    seen: list[str] = []

    def profiler(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            seen.append(codes[frame.f_code])

    mode = _ForbidTorch(forbidden_torch or {}, exercise)
    previous = _getprofile()
    try:
        with one_thread(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with mode:
                if codes:
                    _setprofile(profiler)
                try:
                    yield
                finally:
                    still_ours = _getprofile() is (profiler if codes else previous)
                    if codes:
                        _restore_profile(previous)
    except GradingError:
        raise
    except Exception as e:
        # A forbidden call explains the failure better than whatever it led to.
        forbidden = mode.violation or (seen[0] if seen else None)
        if forbidden:
            raise ForbiddenCallError(_forbidden_message(exercise, forbidden)) from e
        if _isinstance(e, NotImplementedError):
            raise GradingError(
                f"{exercise} is not written yet: replace `raise NotImplementedError()` with your "
                "code."
            ) from e
        raise GradingError(f"{exercise} raised {type(e).__name__}: {e}") from e
    if not still_ours:
        raise TamperingError(f"{exercise} changed the interpreter's profiler; grading refused.")
    if mode.violation:
        raise ForbiddenCallError(_forbidden_message(exercise, mode.violation))
    if seen:
        raise ForbiddenCallError(_forbidden_message(exercise, seen[0]))
    verify_untouched(comparisons=False)


def innermost_function(error: BaseException) -> str | None:
    """The name of the function in which ``error`` was raised (the innermost frame of its
    traceback), e.g. the notebook function whose ``raise NotImplementedError()`` ran."""
    tb = error.__traceback__
    name = None
    while tb is not None:
        name = tb.tb_frame.f_code.co_name
        tb = tb.tb_next
    return name


def _restore_profile(previous: Any) -> None:
    try:
        _setprofile(previous)
    except TypeError:  # a C-level profiler such as cProfile's cannot be re-installed from Python
        _setprofile(None)


def _functions_of(obj: Any) -> list[Any]:
    if _isinstance(obj, type):
        found = []
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)
            if hasattr(value, "__code__"):
                found.append(value)
        return found
    return [obj] if hasattr(obj, "__code__") else []


# --- comparisons that explain themselves ---------------------------------------------------------


def expect_tensor(x: Any, what: str) -> torch.Tensor:
    if _type(x) is not _Tensor:
        raise GradingError(
            f"{what} should be a torch.Tensor, got {_type(x).__module__}.{_type(x).__qualname__}"
            + (
                " (a Tensor subclass: return a plain torch.Tensor)"
                if _isinstance(x, _Tensor)
                else ""
            )
        )
    return x


def expect_shape(x: Any, shape: tuple[int, ...], what: str, letters: str = "") -> torch.Tensor:
    """``letters`` spells the expected shape in the course's letters, e.g. ``"(B, L, D)"``."""
    expect_tensor(x, what)
    if tuple(x.shape) != tuple(shape):
        hint = ""
        if sorted(x.shape) == sorted(shape):
            hint = " The sizes are right but in the wrong order: check your transposes."
        raise GradingError(
            f"{what} has the wrong shape: expected {letters + ' = ' if letters else ''}"
            f"{tuple(shape)}, got {tuple(x.shape)}.{hint}"
        )
    return x


WRONG_DTYPE = (
    "{what} returned dtype {got} for {expected} inputs: the result should have the dtype of the "
    "inputs (do not create tensors with a fixed dtype such as torch.float64)."
)


def expect_dtype(
    x: torch.Tensor, dtype: torch.dtype, what: str, message: str = WRONG_DTYPE
) -> None:
    """Fail unless ``x`` has ``dtype``; ``message`` may use ``{what}``, ``{got}`` (x's dtype) and
    ``{expected}``."""
    if x.dtype != dtype:
        raise GradingError(message.format(what=what, got=x.dtype, expected=dtype))


def _close(a: Any, b: torch.Tensor, atol: float = 1e-6, rtol: float = 1e-5) -> bool:
    """Whether ``a`` is a plain tensor of ``b``'s shape whose values are close to ``b``'s (in
    float64, NaN never close), with the comparison captured at import."""
    if _type(a) is not _Tensor or a.shape != b.shape:
        return False
    with torch.no_grad():
        a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
        return bool(_allclose(a64, b64, rtol=rtol, atol=atol, equal_nan=False))


def expect_close(
    actual: Any,
    expected: torch.Tensor,
    what: str,
    mistakes: Mapping[str, torch.Tensor] | Callable[[], Mapping[str, torch.Tensor]] | None = None,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    *,
    letters: str = "",
    probes: Iterable[Callable[[], str | None]] = (),
) -> None:
    """Fail unless ``actual`` equals ``expected``; when it equals the output of a known mistake
    (``mistakes`` maps a description to the output that mistake gives), say which one.

    ``mistakes`` may be a function returning that mapping, called only on a mismatch (right
    answers do not pay for it). When no mistake matches, each of ``probes`` (property checks) in
    turn may name the problem: it returns a description, reported as "``what`` is wrong: ...",
    raises its own ``GradingError``, or returns None; then comes the generic message (where the
    largest difference is). ``letters`` spells the shape for ``expect_shape``."""
    expect_shape(actual, tuple(expected.shape), what, letters)
    if _close(actual, expected, atol, rtol):
        return
    if callable(mistakes):
        mistakes = mistakes()
    for description, wrong in (mistakes or {}).items():
        if _close(actual, wrong, atol, rtol):
            raise GradingError(f"{what} is wrong: {description}")
    for probe in probes:
        description = probe()
        if description:
            raise GradingError(f"{what} is wrong: {description}")
    with torch.no_grad():
        diff = (actual.detach().to(torch.float64) - expected.detach().to(torch.float64)).abs()
        flat = int(diff.nan_to_num(math.inf).argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))
    nan = " It contains NaN." if bool(torch.isnan(actual).any()) else ""
    raise GradingError(
        f"{what} does not match the reference: the largest difference is "
        f"{float(diff.nan_to_num(math.inf).max()):.3g} at index {index} "
        f"(got {float(actual.detach()[index]):.6g}, expected {float(expected[index]):.6g}).{nan}"
    )


# --- inputs --------------------------------------------------------------------------------------


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Reproducible inputs from a private generator (the notebook's global seed is untouched)."""
    return torch.randn(*shape, generator=generator(seed), dtype=dtype)


def keep_first(lengths: list[int], length: int, extra_axes: int = 2) -> torch.Tensor:
    """A padding mask ``(B, 1, ..., 1, L)`` with ``extra_axes`` singleton axes (two by default,
    broadcasting against scores ``(B, H, L_q, L_k)``): True at the first ``lengths[b]`` positions
    of sequence b (may attend), False at the padding after them."""
    keep = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]  # (B, L)
    return keep.reshape(len(lengths), *([1] * extra_axes), length)
