"""nbgrader's ``OverwriteCells`` without its false alarm about hidden tests.

At autograde, nbgrader puts every locked cell back from the gradebook and compares checksums.
The gradebook holds the checksum of the *source* cell, hidden tests included, while students
were given the cell without them, so nbgrader 0.9 reports every test cell that has
``### BEGIN HIDDEN TESTS``, for every submission, untouched or not::

    Attribute 'checksum' for cell test_layer_norm has changed! (should be: ..., got: ...)

``HiddenTestsOverwriteCells`` compares the submitted cell with the cell as it was released (the
source with its hidden tests removed, as ``ClearHiddenTests`` removed them): a cell as released
is put back without a warning, a cell the student changed is still reported, saying so. What is
graded is the same either way: the gradebook's cell, hidden tests included.
"""

from __future__ import annotations

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import ClearHiddenTests, OverwriteCells

__all__ = ["HiddenTestsOverwriteCells", "released_source"]


def released_source(source: str, config=None) -> str:
    """``source`` (a source cell's text) as ``generate_assignment`` released it: without its
    hidden-test regions (delimiters from ``config``, nbgrader's by default)."""
    cell = NotebookNode(cell_type="code", source=source, metadata={})
    ClearHiddenTests(config=config)._remove_hidden_test_region(cell)
    return cell.source


class HiddenTestsOverwriteCells(OverwriteCells):
    """``OverwriteCells`` that reports a changed checksum only when the student changed the cell.

    Configured as ``OverwriteCells`` is (``c.OverwriteCells.add_missing_cells`` applies)."""

    def preprocess_cell(self, cell, resources, cell_index):
        self._submitted = cell.source  # nbgrader replaces it when the checksums differ
        return super().preprocess_cell(cell, resources, cell_index)

    def report_change(self, name: str, attr: str, old, new) -> None:
        if attr != "checksum":
            return super().report_change(name, attr, old, new)
        source = self.gradebook.find_source_cell(name, self.notebook_id, self.assignment_id)
        if self._submitted.rstrip() == released_source(source.source, self.config).rstrip():
            self.log.debug("Cell %s is as released; its hidden tests are put back", name)
            return None
        self.log.warning(
            "Attribute 'checksum' for cell %s has changed! The submitted cell is not the released "
            "one (the student edited a locked cell); the gradebook's copy is graded instead.",
            name,
        )
        return None
