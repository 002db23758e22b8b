"""The grader's questions to the student's kernel, through nbgrader's kernel client.

``KernelAsk`` is the ``Ask`` (``encoder_lib.grading.runner``) that ``judge_execute.JudgeExecute``
hands the runner at autograde: each ``Call`` is sent into the kernel as one probe cell
(``wire.serve``), and what comes back is plain tensors (``wire``: JSON and safetensors, never
pickle). A kernel that dies, hangs or answers twice gives an ``Observation`` whose failure says
so, never an exception.
"""

from __future__ import annotations

from typing import Any, Protocol

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from encoder_lib.grading import wire
from encoder_lib.grading.kernel.observe import Call, Failure, Observation

__all__ = ["KernelAsk", "KernelClient"]


class KernelClient(Protocol):
    """What ``KernelAsk`` needs of nbgrader's kernel client (``judge_execute.JudgeExecute`` is
    one): the notebook being graded, a way to run a cell in the kernel, and a way to bring the
    kernel back after it died or hung."""

    nb: nbformat.NotebookNode
    timeout: int | None

    def execute_cell(self, cell: Any, index: int, store_history: bool = True) -> Any: ...

    def recover(self) -> None: ...


class KernelAsk:
    """An ``Ask`` that runs each ``Call`` in the student's kernel through nbgrader's client.
    ``prefetch`` sends an exercise's calls in one request; a call not answered by it (or asked
    later, by a probe) makes its own round trip."""

    def __init__(self, client: KernelClient, index: int):
        self.client = client
        self.index = index
        self.answers: dict[int, Observation] = {}
        self.timed_out: Observation | None = None
        """Set when a request ran past the time limit: the exercise's later calls are not
        sent (each would wait out the limit again) and get this answer."""

    def prefetch(self, calls: list[Call]) -> None:
        observations = self._request(calls)
        if len(observations) == len(calls) and not any(_unanswered(o) for o in observations):
            self.answers = {id(call): obs for call, obs in zip(calls, observations, strict=True)}

    def __call__(self, call: Call) -> Observation:
        cached = self.answers.pop(id(call), None)
        return cached if cached is not None else self._request([call])[0]

    def _request(self, calls: list[Call]) -> list[Observation]:
        if self.timed_out is None:
            observations = self._send(calls)
            if (
                observations[0].failure is not None
                and observations[0].failure.error == "time-limit"
            ):
                self.timed_out = observations[0]
            return observations
        return [self.timed_out]

    def _send(self, calls: list[Call]) -> list[Observation]:
        request = wire.encode_calls(calls)
        # An import statement, not a call of `__import__`: a call resolves `__import__` through
        # the notebook's globals first, where an answer could have put its own (issue 18: a
        # notebook-global `__import__` answered the grader); the statement uses the builtins.
        source = (
            "from encoder_lib.grading.wire import serve as _encoder_lab_serve\n"
            f"_encoder_lab_serve({request!r})\n"
            "del _encoder_lab_serve"
        )
        probe = nbformat.v4.new_code_cell(source)
        cells = self.client.nb.cells
        original = cells[self.index]
        try:
            self.client.execute_cell(probe, self.index, store_history=False)
        except DeadKernelError:
            return [
                _no_answer(
                    "the kernel died (out of memory, or the code ended the process)", "kernel-died"
                )
            ]
        except CellTimeoutError:  # it ignored the interrupt: the kernel is still busy with it
            self.client.recover()
            return [self._time_limit(" and did not stop when interrupted")]
        finally:
            cells[self.index] = original
        answers = [
            out["data"][wire.MIME]
            for out in probe.outputs
            if out.get("output_type") == "display_data" and wire.MIME in out.get("data", {})
        ]
        if not answers:
            errors = [
                out.get("ename") for out in probe.outputs if out.get("output_type") == "error"
            ]
            if "CellTimeoutError" in errors:
                return [self._time_limit()]
            return [_no_answer(f"it stopped with {errors[-1] if errors else 'no reply'}")]
        if len(answers) > 1:  # a hook or a thread published a second answer beside serve's
            return [_no_answer(f"{len(answers)} answers came back to one request of the grader")]
        try:
            return wire.decode_observations(answers[0]) or [_no_answer("an empty answer")]
        except wire.WireError as error:
            return [_no_answer(f"its answer could not be read: {error}")]

    def _time_limit(self, how: str = "") -> Observation:
        return _no_answer(
            f"it ran past the time limit of {self.client.timeout} s{how} (does it loop forever?)",
            "time-limit",
        )


def _unanswered(obs: Observation) -> bool:
    return obs.failure is not None and obs.failure.kind == "no answer"


def _no_answer(reason: str, mistake: str = "no-answer") -> Observation:
    """The kernel did not answer; ``mistake``: why, as a step id (``runner.STEP_MISTAKES``)."""
    return Observation(failure=Failure("no answer", mistake, reason))
