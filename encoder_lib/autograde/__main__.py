"""``python -m encoder_lib.autograde``: grade a course on Dask (see ``distributed.py``)."""

import sys

from encoder_lib.autograde.distributed import main

sys.exit(main())
