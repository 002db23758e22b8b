"""The instructor's side of grading: what runs with nbgrader, never in a student's kernel.

Notebooks never import this package. ``nbgrader_config.py`` names its preprocessors, and the
grading tools use it to grade a class on one machine or many; it lives inside ``encoder_lib`` so
that every machine that grades has it installed with the references it compares against.
"""
