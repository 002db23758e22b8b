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

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Student versions carry no outputs; the solutions keep theirs for nbval.
c.ClearOutput.enabled = True
