"""What runs inside the student's kernel: the other side of the wire.

- ``observe``: runs one call of the student's code and records what happened (value, exception,
  forbidden calls, in-place changes), judging nothing; the public registries a check module uses
  for calls that need more than calling the target (scenarios, parts, preparations).
- ``observe_jax``: the same for notebook 10's JAX and Flax answers.
- ``restart_hints``: the NameError hints a test cell prints after a kernel restart.

Everything else in ``encoder_lib.grading`` judges: in the notebook it runs in the kernel too, but
at autograde it runs in nbgrader's process, on what ``wire`` brings back from here.
"""
