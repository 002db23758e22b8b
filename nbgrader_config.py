"""nbgrader configuration for the Transformer Encoder Lab (see README, "For instructors").

solutions/<assignment>/  the nbgrader source notebooks (with solutions and hidden tests)
notebooks/<assignment>/  the student versions, written by `nbgrader generate_assignment`
"""

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

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


# --- autograding: the locked setup cell runs first -----------------------------------------------
# The setup cell imports encoder_lib.grading, which snapshots torch and encoder_lib so that later
# tampering is detected. A student cell added *above* it would run before that snapshot (and
# could, for example, put a fake grading module in sys.modules), so at autograde time code cells
# above the setup cell are replaced by a comment. Students are told so in every notebook's
# setup cell; nothing a correct answer needs can live there.
from nbgrader.preprocessors import NbGraderPreprocessor  # noqa: E402


class DisableCodeAboveSetup(NbGraderPreprocessor):
    """Blank every code cell that comes before the cell whose nbgrader grade_id is "setup"."""

    def preprocess(self, nb, resources):
        ids = [cell.metadata.get("nbgrader", {}).get("grade_id") for cell in nb.cells]
        if "setup" in ids:
            for cell in nb.cells[: ids.index("setup")]:
                if cell.cell_type == "code" and cell.source.strip():
                    cell.source = "# (disabled at grading: code above the setup cell does not run)"
                    cell.outputs = []
        return nb, resources


c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    DisableCodeAboveSetup,
    "nbgrader.preprocessors.CheckCellMetadata",
]
