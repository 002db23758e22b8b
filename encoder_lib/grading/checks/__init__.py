"""The exercises' checks, one module per notebook (``nNN_<notebook>.py``, named as the notebook).

Each module describes its notebook's exercises as data (``runner.Exercise``: cases, the
reference, the catalogue of named mistakes, the built-ins it forbids) and registers them with
``runner.register_given``, which returns the ``check_*`` function the notebook's test cells call.
What the student's kernel must run for a check (a scenario, a part, a preparation) is registered
with the kernel's public API (``kernel.observe.scenario``...), in the module, beside its check.
``layer_cases.py`` holds the cases the layer exercises of 05, 07 and 09 share.

Importing this package registers every exercise; ``NOTEBOOKS`` lists the modules in course order.
"""

from . import (
    n01_self_attention,
    n02_multi_head_attention,
    n03_layer_norm,
    n04_feed_forward,
    n05_encoder,
    n06_sentiment_capstone,
    n07_decoder,
    n08_pretraining,
    n09_modern_encoder,
    n10_jax_encoder,
    n11_real_encoder,
)

NOTEBOOKS = (
    n01_self_attention,
    n02_multi_head_attention,
    n03_layer_norm,
    n04_feed_forward,
    n05_encoder,
    n06_sentiment_capstone,
    n07_decoder,
    n08_pretraining,
    n09_modern_encoder,
    n10_jax_encoder,
    n11_real_encoder,
)
"""The checks' modules in course order."""

_EXPORTED = {name: getattr(module, name) for module in NOTEBOOKS for name in module.__all__}
globals().update(_EXPORTED)  # every check_<exercise> (and load_reference_weights, notebook 02's)
__all__ = list(_EXPORTED)
