"""The `ldpt` command line.

Decoders factor small dense matrices (OLH, RAPPOR); multi-threaded BLAS makes those 10–30×
slower on small machines, so the CLI and the collector it starts default to one BLAS thread
(set OPENBLAS_NUM_THREADS / OMP_NUM_THREADS yourself to override). This must run before numpy
is imported, hence here.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
