"""anvil: a load generator for LLM serving endpoints, built on Locust.

One setting is made here, before any module imports numpy: OpenBLAS runs single-threaded
unless the user set it (``OPENBLAS_NUM_THREADS``). Why: anvil uses numpy for columns,
sorting and percentiles, never for matrix products, yet OpenBLAS starts one thread per core
at import and spins them up, which cost each process 0.14 CPU-s at start on this 2-core
machine (0.28 s against 0.14 s for `import numpy`) and puts idle threads beside the event
loop that stamps the streams. Every anvil process (Locust workers, the simulator, the CLI)
imports this package first, so the one line covers them all.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
