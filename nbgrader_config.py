"""nbgrader configuration for the Transformer Encoder Lab (see docs/INSTRUCTORS.md).

solutions/<assignment>/  the nbgrader source notebooks (with solutions and hidden tests)
notebooks/<assignment>/  the student versions, written by `nbgrader generate_assignment`
"""

import warnings

from sqlalchemy.exc import SAWarning

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

# nbgrader 0.9.6's Gradebook.add_submission builds a submission's rows before it adds them to the
# session; under SQLAlchemy 2 every lazy load in between autoflushes and warns ("Object of type
# <SubmittedAssignment> not in session, add operation along 'Student.submissions' will not
# proceed", three blocks per submission at autograde). Harmless: add_submission then adds the
# submission, and every row hanging from it, itself (the grades are right: tests/pipeline).
# encoder_lib.autograde.gradebook builds its rows under no_autoflush and never warns.
warnings.filterwarnings("ignore", r"Object of type <Submitted\w+> not in session", SAWarning)

c.CourseDirectory.course_id = "transformer-encoder-lab"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"

# Every notebook runs on the standard python3 kernel; nbgrader forces the source notebook's
# kernelspec onto submissions.
c.Execute.kernel_name = "python3"
# The slowest graded cell takes about 3 s on a 2-core laptop; 60 s leaves a wide margin and
# still stops an infinite loop quickly (that cell scores 0, later cells still run).
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True

# A test cell a student deleted is put back and graded (rather than left for manual grading), so
# an accidental deletion costs nothing and a deliberate one gains nothing.
c.OverwriteCells.add_missing_cells = True

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Student versions carry no outputs; the solutions keep theirs for nbval.
c.ClearOutput.enabled = True


# --- autograding: verdicts decided outside the student's kernel ---------------------------------
# encoder_lib.autograde.judge_execute (an importable module with its tests): JudgeExecute runs
# each notebook as nbgrader's Execute does, except that every test cell graded by an encoder_lib
# exercise is judged in this process (the student's kernel only evaluates their code on inputs
# sent to it and hands back plain tensors), and cells tagged "demo" (figures, widgets) are
# skipped. encoder_lib.autograde.disable_code_above_setup: DisableCodeAboveSetup blanks student
# code placed above the locked setup cell.
# HiddenTestsOverwriteCells is nbgrader's OverwriteCells without its false alarm: a test cell
# whose hidden tests were removed from the student version (and nothing else changed) is not
# reported as changed. The classes are named as strings: nbgrader imports them when it grades,
# so other commands (db, generate_assignment, export...) do not pay for importing torch.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "encoder_lib.autograde.overwrite.HiddenTestsOverwriteCells",
    "encoder_lib.autograde.disable_code_above_setup.DisableCodeAboveSetup",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# Its kernels are warm: each is forked from a process that has already imported torch,
# encoder_lib and the setup cell's other imports (encoder_lib.autograde.warm_kernels: about 2x
# faster per notebook). --JudgeExecute.kernels=cold (after `--` for python -m encoder_lib.autograde)
# starts a new Python for each instead.
c.JudgeExecute.kernels = "warm"
c.Autograde.autograde_preprocessors = [
    "encoder_lib.autograde.judge_execute.JudgeExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]


# --- feedback pages: maths without a CDN, long lines wrapped ------------------------------------
# encoder_lib.autograde.feedback_page (an importable module with its tests): nbgrader's feedback
# HTML with the TeX turned into MathML (no MathJax download) and output lines that wrap in the page.
c.GenerateFeedback.exporter_class = "encoder_lib.autograde.feedback_page.OfflineFeedbackExporter"
