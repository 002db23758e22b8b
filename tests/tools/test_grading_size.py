"""tools/grading_size.py: issue 19's measure counts what it says it counts."""

from __future__ import annotations

import textwrap

from encoder_lib.grading import runner
from tools.grading_size import EXERCISE, anatomy, modules, string_only_lines

# Line by line, what each holds (the comment at the right is not part of the source).
SOURCE = textwrap.dedent(
    '''\
    """A checks module."""
    from .feedback import Mistake

    # the reference
    def _cases(thorough):
        """Its cases."""
        x = 1
        return {
            Mistake(
                "an-id",
                "the text a student reads, "
                "on two lines.",
            ): x + 1,
        }


    check_x = register_given(
        1, "def x():", _cases, forbidden=Forbidden(torch={})
    )
    '''
)
# 1 docstring, 2 import, 3 blank, 4 comment, 5 code, 6 docstring, 7-8 code, 9-13 the Mistake
# call (its closing line included), 14 code, 15-16 blank, 17-19 the registration (its Forbidden
# table included).


def test_every_line_is_counted_once_under_what_it_holds():
    assert anatomy(SOURCE) == {
        "mistakes": 5,
        "docstrings": 2,
        "registrations": 3,
        "forbidden": 0,
        "imports": 1,
        "blank/comment": 4,
        "code": 4,
    }
    assert sum(anatomy(SOURCE).values()) == len(SOURCE.splitlines()) == 19


def test_a_forbidden_table_of_its_own_and_string_only_lines():
    source = (
        'T = Forbidden(\n    torch={f: "f"},\n)\nm = (\n    "a message "\n    "on two lines"\n)\n'
    )
    assert anatomy(source)["forbidden"] == 3
    assert string_only_lines(source) == 2  # the two lines holding nothing but the message
    # the module's docstring, the id, the message's two lines; a docstring opening a block shares
    # its line with the INDENT token and is not counted
    assert string_only_lines(SOURCE) == 4


def test_the_topic_modules_hold_every_registered_exercise_and_add_up():
    sources = modules(None)
    assert sum(len(EXERCISE.findall(s)) for s in sources.values()) == len(runner.EXERCISES)
    for source in sources.values():
        assert sum(anatomy(source).values()) == len(source.splitlines())
