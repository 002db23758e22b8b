"""What runs inside the student's kernel: the other side of the wire. It imports nothing from the
rest of ``encoder_lib.grading``, which builds on it.

- ``observe``: runs one call of the student's code and records what happened (value, exception,
  forbidden calls, in-place changes), judging nothing; the public registries a check module uses
  for calls that need more than calling the target (scenarios, parts, preparations).
- ``observe_jax``: the same for notebook 10's JAX and Flax answers.
- ``forbidden``: what each exercise may not call (``Forbidden``, ``forbid``, ``rules``), in every
  form (``expanded``): the trap of ``observe`` and the source rules both read it.
- ``source_rules``: the constructs an answer's source may not use, applied to the cell that
  defines the answer before it runs (and by autograde to the submitted notebook).

Everything else in ``encoder_lib.grading`` judges: in the notebook it runs in the kernel too, but
at autograde it runs in nbgrader's process, on what ``wire`` brings back from here.
"""
