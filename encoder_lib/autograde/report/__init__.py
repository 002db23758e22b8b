"""Which mistakes did the class make: a report for the instructor, from the named mistakes.

    python -m encoder_lib.autograde.report 01_self_attention
    python -m encoder_lib.autograde.report "*" --course-dir /srv/course --output mistakes.html

Run it after autograde, in the course folder (or pass ``--course-dir``). It reads the gradebook
(who submitted, every test cell's points) and the verdict autograde kept in every test cell of
the autograded notebooks (``records``: the mistake's id, the exercise, and for a mistake that
lives in an earlier exercise, that one), and writes an HTML page that works offline (its figures
are PNG images inside the page) and a CSV of the same rows beside it:

- per exercise: the share of the class that got it right; the named mistakes by the number of
  students who made them, as a bar chart and a table with their wording and the students' ids;
  the failures no catalogue entry named, grouped by their message; the students who lost points
  there because of an earlier exercise. A mistake is counted once, at the exercise where it
  lives (its root): exercise 4 failing because exercise 1's function is wrong counts at
  exercise 1;
- per assignment, and across the assignments of the report: the exercises ranked by how many
  students lost points to a mistake that lives there, and the commonest reasons;
- per student: the named mistakes, what to talk about in office hours.

The page names students: it is the instructor's copy. A submission graded before records existed
(or whose records are malformed) is left out and said so in one line per assignment; the exit
status is then 1 (2 when nothing could be reported).

``data.py`` reads the rows and counts them; ``page.py`` writes the HTML and the CSV from them
(it imports ``data``, never the reverse); ``__main__.py`` is the command.
"""
