"""The C heap of a process that post-processes: memory it frees is kept for its next blocks.

Why: reading, building and writing a large run make and drop thousands of blocks of text
and of columns, a megabyte or more each. glibc gives memory freed at the top of its heap
back to the system at once (128 KiB of slack by default), so the next block is fresh memory
again, faulted in page by page: on this VM a child decoding half a million benchmark rows
took 2.05 s in a fresh process and 1.33 s the second time in the same one. Keeping 64 MiB
of slack at the top (glibc's M_TOP_PAD, which also asks the system for that much more at a
time) made the first time 1.36 s. Only post-processing calls it: `postprocess.build_run`,
`docscan.verify_file` and their child processes (a live run's load process keeps glibc's
defaults while it measures, `live/memtrim.py`, and calls it only when its run is over).
Off glibc it does nothing.
"""

from __future__ import annotations

import ctypes

M_TOP_PAD = -2  # glibc's mallopt parameter
TOP_PAD_BYTES = 64 * 2**20


def keep_freed_memory() -> None:
    """Keep `TOP_PAD_BYTES` of freed memory at the top of the C heap (see above)."""
    try:  # the process's own symbols (dlopen(NULL)): no library search
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mallopt(M_TOP_PAD, TOP_PAD_BYTES)
