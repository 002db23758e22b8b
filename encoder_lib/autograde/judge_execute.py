"""``JudgeExecute``: nbgrader's ``Execute``, with the grades decided outside the student's kernel.

``JudgeExecute`` replaces nbgrader's ``Execute`` at autograde. It runs the notebook in the
student's kernel as usual (setup cell, answer cells, locked cells) with these changes:

- a test cell graded by a registered exercise (``encoder_lib.grading.EXERCISES``, keyed by the
  cell's grade_id) is not run in the kernel. This process runs the exercise's cases itself: it
  builds the inputs, sends each ``Call`` into the kernel (``kernel_ask``), reads back plain
  tensors (``wire``: JSON and safetensors, never pickle), and judges them against the reference
  computed here. The cell's outputs are then written from the verdict: one "Correct" line, or
  the short error block that scores the cell 0. Nothing the kernel prints reaches that cell, and
  nothing in the kernel (a rebound function, a frame, a closure, a fake module) can reach the
  comparison, the catalogue or the expected values, which never enter the kernel.
- before an exercise's first call, its answer cells are read from the submitted notebook and
  checked against the authorship rules (``authorship``: the built-ins it forbids, and the
  constructs that only get around rules, in any earlier answer cell): a breach scores the
  test cell 0 and names the construct, and no call is sent. The kernel's own trap could be
  switched off by the code it watches; the source cannot be changed by the kernel.
- only the cells the course runs are run: the setup cell, the answer cells and the course's
  locked and test cells (the cells nbgrader knows). Cells tagged ``demo`` (figures, widgets,
  training shown to the student) define nothing an answer needs (``tests/notebooks`` checks
  this, and that every other course cell is one nbgrader knows), so grading need not pay for
  them; a cell the student added does not run either (its output says so): what it could do
  to the kernel, the authorship rules would not have read. Known cells are those with a
  grade_id after nbgrader's ``OverwriteCells`` (which deletes a grade_id the gradebook does
  not have: forged metadata does not make a cell known); an answer cell (``solution``) runs and
  is read by the rules.

Every graded test cell also keeps its verdict in its metadata: passed or not, the mistake's id,
the exercise and, for a mistake that lives in an earlier exercise, that one (``records``). The
instructor's report (``encoder_lib.autograde.report``) counts mistakes from these records.

Code above the setup cell was blanked before this step (``disable_code_above_setup``).

A notebook that imports JAX (10) is run with a private copy of the instructor's JAX compile
cache, which its kernel reads and never writes, deleted once the notebook is graded; any other
notebook's kernel has no JAX cache at all (``jax_cache``: no kernel can leave a program that
another student's kernel loads).

What is and is not guaranteed is written in docs/GRADING.md.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
from collections.abc import Iterator

import nbformat
import torch
from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import CellTimeoutError
from nbgrader.preprocessors import Execute
from nbgrader.utils import determine_grade, is_grade, is_solution
from traitlets import Enum

from encoder_lib.autograde import authorship, jax_cache, records, scratch
from encoder_lib.autograde.disable_code_above_setup import DISABLED
from encoder_lib.autograde.kernel_ask import KernelAsk
from encoder_lib.autograde.warm_kernels import WITH_JAX_VARIABLE
from encoder_lib.grading import runner
from encoder_lib.grading.feedback import GradingError, NotWrittenYet

__all__ = ["DEMO_TAG", "JudgeExecute", "for_report"]

DEMO_TAG = "demo"
"""Cells with this tag only show something; autograde skips them."""

PASSED = "Correct: {title} passes every test, visible and hidden (checked by the grader).\n"

# An unfinished exercise, said for a returned report rather than to someone at the notebook
# ("run its cell, then this one" is what the notebook's own check says).
NOT_WRITTEN = (
    "{name} was not written: the submitted notebook still has the `raise NotImplementedError()` "
    "it was given, so this test earns no points."
)
CALLS_STUB = (
    "it calls {name}, which was not written (the submitted notebook still raises "
    "NotImplementedError() there), so this test earns no points."
)


NOT_RUN = (
    "(not run at grading: only the setup cell, the answer cells and the course's locked cells "
    "run when a notebook is graded, so an answer must not need what a cell of your own "
    "defines)\n"
)


UNRESPONSIVE = (
    "this cell ran past the time limit of {timeout} s and did not stop when interrupted, so the "
    "grader restarted the kernel and ran the cells before it again; what this cell defines is "
    "missing. Does it loop forever?"
)


UNDEFINED_AFTER_HANG = (
    "{name} is not defined: the cell that defines it ran past the time limit of {timeout} s and "
    "did not stop when interrupted (does it loop forever?), so the grader restarted the kernel "
    "without it and this test earns no points."
)


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


class JudgeExecute(Execute):
    """nbgrader's ``Execute``, with registered test cells judged in this process, and a kernel
    that stops answering costing only the cell (or exercise) that hung it.

    A cell or a judged call that runs past ``timeout`` is interrupted (nbgrader's setting); code
    that ignores the interrupt (``signal.signal(signal.SIGINT, signal.SIG_IGN)``, a loop in C)
    keeps the kernel busy, and nbclient then raises ``CellTimeoutError``, which would end the
    autograde of the whole submission (nbgrader exits 1). Here the kernel is restarted instead,
    the cells it had run are run again in a fresh kernel (``recover``), and the cell or exercise
    that hung scores 0 with "ran past the time limit".

    Its kernels are warm unless ``kernels`` is ``"cold"`` (see ``warm_kernels``)."""

    kernels = Enum(
        ["warm", "cold"],
        default_value="warm",
        help="warm: fork each kernel from a process that has imported torch and the setup "
        "cell's other imports (encoder_lib.autograde.warm_kernels); cold: start Python for each "
        "(jupyter_client's own kernel manager). nbgrader's Execute fixes its kernel manager "
        "class in its constructor, so this is how the choice is made.",
    ).tag(config=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.kernels == "warm":
            from encoder_lib.autograde.warm_kernels import WarmKernelManager

            self.kernel_manager_class = WarmKernelManager
        # Read the instructor's JAX cache now, before this process's first kernel runs a
        # student's code (plain `nbgrader autograde` of any assignment), if it has been built.
        jax_cache.read_if_built()

    def preprocess(self, nb, resources=None, km=None):
        self._ran: list[int] = []
        """The code cells the kernel has run, by index: what a restarted kernel runs again."""
        self._hung: list[str] = []
        """The sources of the cells that hung: what they define is missing after the restart."""
        imports_jax = jax_cache.imports_jax(nb)
        cache = jax_cache.sealed() if imports_jax else None
        with jax_cache.private_copy(cache, scratch.scratch_root()) as copied:
            self._kernel_env = jax_cache.kernel_environment(copied)
            # a warm kernel then comes from the source that has imported JAX too
            self._kernel_env[WITH_JAX_VARIABLE] = "1" if imports_jax else ""
            return super().preprocess(nb, resources, km)

    async def async_start_new_kernel(self, **kwargs):
        """nbclient's kernel start, with the JAX cache this notebook's kernel may read (a
        restarted kernel keeps it: jupyter_client restarts with the same arguments)."""
        kwargs["env"] = {**(kwargs.get("env") or os.environ), **self._kernel_env}
        return await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)  # nbclient binds its own at class level

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return super().preprocess_cell(cell, resources, index)
        if DEMO_TAG in cell.metadata.get("tags", []):
            cell.outputs = []
            return cell, resources
        if not (_grade_id(cell) or is_solution(cell)):  # a cell the student added: not run
            if cell.source.strip() and not cell.source.startswith(DISABLED):
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=NOT_RUN)]
            return cell, resources
        if not is_grade(cell) or is_solution(cell):
            return self._run_in_kernel(cell, resources, index, again_after_restart=True)
        exercise = runner.EXERCISES.get(_grade_id(cell) or "")
        if exercise is None:  # a test cell of its own: the kernel runs it, nbgrader scores it
            cell, resources = self._run_in_kernel(cell, resources, index)
            records.store(cell, _kernel_verdict(cell, self.log))
            return cell, resources
        own, earlier = authorship.breaches(self.nb.cells, index, exercise.name)
        if own or earlier:
            error = authorship.refusal(exercise, own, earlier)
            cell.outputs, verdict = [_error_output(error)], _verdict(exercise, error)
        else:
            cell.outputs, verdict = self._judge(exercise, index)
        records.store(cell, verdict)
        return cell, resources

    def _run_in_kernel(self, cell, resources, index, again_after_restart=False):
        """nbgrader's execution of ``cell``; if the kernel stops answering, the cell's outputs
        say so (an error output: a test cell scores 0) and a fresh kernel takes over."""
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except CellTimeoutError:
            self.log.warning("cell %s ran past the time limit and ignored the interrupt", index)
            self._hung.append(cell.source)
            self.recover()
            cell.outputs = [
                nbformat.v4.new_output(
                    "error",
                    ename="CellTimeoutError",
                    evalue=UNRESPONSIVE.format(timeout=self.timeout),
                    traceback=[f"CellTimeoutError: {UNRESPONSIVE.format(timeout=self.timeout)}"],
                )
            ]
            return cell, resources
        if again_after_restart:
            self._ran.append(index)
        return cell, resources

    def _hung_cell_said(self, exercise: runner.Exercise, error: GradingError):
        """The error to report when the exercise's name is missing because the cell defining
        it hung (and was left out of the restarted kernel), else None."""
        if error.mistake != "not-defined":
            return None
        defines = re.compile(rf"^(def|class)\s+{re.escape(exercise.target)}\b", re.M)
        if not any(defines.search(source) for source in self._hung):
            return None
        return GradingError(
            UNDEFINED_AFTER_HANG.format(name=exercise.target, timeout=self.timeout),
            exercise=error.exercise,
            mistake="time-limit",
        )

    def recover(self) -> None:
        """Restart the kernel and run again, each in a copy whose outputs are dropped, the
        cells it had run (setup, answers, locked cells; not test cells, which only check). A
        cell that hangs again is left out and the kernel restarted once more."""
        while True:
            run_sync(self._restart)()
            for j in list(self._ran):
                original = self.nb.cells[j]
                try:
                    self.execute_cell(copy.deepcopy(original), j, store_history=False)
                except CellTimeoutError:
                    self._ran.remove(j)
                    break
                finally:
                    self.nb.cells[j] = original
            else:
                return

    async def _restart(self) -> None:
        await ensure_async(self.km.restart_kernel(now=True))
        await ensure_async(self.kc.wait_for_ready(timeout=self.startup_timeout))

    def _judge(self, exercise: runner.Exercise, index: int) -> tuple[list, records.Verdict]:
        ask = KernelAsk(self, index)
        with _one_thread():
            try:
                runner.run(exercise, ask, thorough=True)
            except GradingError as error:
                error = self._hung_cell_said(exercise, error) or for_report(error)
                return [_error_output(error)], _verdict(exercise, error)
        output = nbformat.v4.new_output(
            "stream", name="stdout", text=PASSED.format(title=exercise.title)
        )
        return [output], _verdict(exercise)


def _error_output(error: GradingError):
    """The error block that scores a test cell 0 and says why."""
    return nbformat.v4.new_output(
        "error",
        ename=type(error).__name__,
        evalue=error.problem,
        traceback=error.lines(colour=True),
    )


def _verdict(exercise: runner.Exercise, error: GradingError | None = None) -> records.Verdict:
    """The record of ``exercise``'s test cell: passed, or ``error``'s mistake and root."""
    if error is None:
        return records.Verdict(exercise.name, exercise.title, passed=True)
    return records.Verdict(
        exercise.name,
        exercise.title,
        passed=False,
        mistake=error.mistake,
        root=error.root,
        root_title=error.root_title,
        message=error.problem,
        parts=error.parts,
    )


def _kernel_verdict(cell, log) -> records.Verdict:
    """The record of a test cell the kernel ran: passed when nbgrader gives it full points; its
    error (or its lost points) as the message otherwise, with no mistake id."""
    name = _grade_id(cell) or "?"
    score, points = determine_grade(cell, log)
    if score is not None and points is not None and score >= points:
        return records.Verdict(name, name, passed=True)
    errors = [out for out in cell.outputs if out.get("output_type") == "error"]
    if errors:
        message = f"{errors[-1].get('ename', '')}: {errors[-1].get('evalue', '')}"
    else:
        message = f"scored {score:g} of {points:g}" if score is not None else "not scored"
    return records.Verdict(name, name, passed=False, message=message)


def for_report(error: GradingError) -> GradingError:
    """``error`` as a returned report says it (a new error; ``error`` is not changed): an
    unfinished exercise's message tells the student what was missing instead of which cells to
    run, and no ``grading.hint()`` is offered (there is no kernel to run it in).

    Which wording: the error's mistake and root say whose code is unfinished. ``not-written``
    with no root is the exercise's own (``runner.NOT_WRITTEN``); ``calls-unwritten``, or
    ``not-written`` rooted at an earlier exercise (the runner's trace), is a function it calls
    (``runner.CALLS_STUB``). The function's name comes from ``error.parts``."""
    name = error.parts.get("name")
    if not isinstance(error, NotWrittenYet) or name is None:
        return error.replaced(hint=None)
    if error.mistake == "not-written" and error.root is None:
        return error.replaced(hint=None, problem=NOT_WRITTEN.format(name=name))
    if error.mistake in ("not-written", "calls-unwritten"):
        return error.replaced(hint=None, problem=CALLS_STUB.format(name=name))
    return error.replaced(hint=None)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """The references are tiny: one thread is fastest, above all on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
