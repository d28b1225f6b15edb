"""anvil: a load generator for LLM serving endpoints, built on Locust.

One setting is made here, before any module imports numpy: OpenBLAS runs single-threaded
unless the user set it (``OPENBLAS_NUM_THREADS``). Why: anvil uses numpy for columns,
sorting and percentiles, never for matrix products, yet OpenBLAS starts one thread per core
at import and spins them up, which cost each process 0.14 CPU-s at start on this 2-core
machine (0.28 s against 0.14 s for `import numpy`) and puts idle threads beside the event
loop that stamps the streams. Every anvil process (Locust workers, the simulator, the CLI)
imports this package first, so the one line covers them all.

Likewise numpy does not ask the kernel for huge pages (``NUMPY_MADVISE_HUGEPAGE``) unless
the user set it: where transparent huge pages are on "madvise" (Ubuntu's default), every
fresh array numpy advises stalls in the kernel's compaction, and anvil's arrays are
short-lived columns, made fresh each time: an 8 MB array took 14 ms to fill new against
2.9 ms without the advice on this VM, which made building a million rows' benchmark 0.6
CPU-s slower (1.31 s against 0.70 s) and reading their raw file 0.6 CPU-s slower.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
