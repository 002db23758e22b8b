"""``DisableCodeAboveSetup``, a sanitize step of autograde: student code cells placed above the
locked setup cell are blanked, so that the notebook starts the way the course set it up."""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

__all__ = ["DISABLED", "DisableCodeAboveSetup"]

DISABLED = "# (disabled at grading: code above the setup cell does not run)"
"""What ``DisableCodeAboveSetup`` puts in place of a code cell above the setup cell."""


class DisableCodeAboveSetup(NbGraderPreprocessor):
    """Blank every code cell before the cell whose grade_id is ``setup``."""

    def preprocess(self, nb, resources):
        ids = [cell.metadata.get("nbgrader", {}).get("grade_id") for cell in nb.cells]
        if "setup" in ids:
            for cell in nb.cells[: ids.index("setup")]:
                if cell.cell_type == "code" and cell.source.strip():
                    cell.source = DISABLED
                    cell.outputs = []
        return nb, resources
