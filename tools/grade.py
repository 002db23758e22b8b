"""Grade a course on Dask: ``python tools/grade.py ASSIGNMENT...`` is
``python -m encoder_lib.autograde ASSIGNMENT...`` (see encoder_lib/autograde/distributed.py).

    python tools/grade.py "*"                                   # every assignment, local cluster
    python tools/grade.py 01_self_attention --workers 2
    python tools/grade.py "*" --scheduler tcp://HOST:8786       # workers started elsewhere
"""

import sys

from encoder_lib.autograde.distributed import main

if __name__ == "__main__":
    sys.exit(main())
