"""The C heap of a process that decodes a benchmark's rows: memory it frees is kept for its
next blocks.

Why: decoding a million rows a block at a time (`rowparts`, `docscan`) makes and drops
thousands of blocks of text, rows and columns, a megabyte or more each. glibc gives memory
freed at the top of its heap back to the system at once (128 KiB of slack by default), and
serves a block of 128 KiB or more with a fresh mapping of its own, unmapped when it is
freed; either way the next block is fresh memory again, faulted in page by page. Here the
process keeps 64 MiB of slack at the top (glibc's M_TOP_PAD, which also asks the system
for that much more at a time) and takes blocks up to 32 MiB (M_MMAP_THRESHOLD's largest)
from its heap, where a freed one is reused. Measured on this VM: a child decoding half of
a million benchmark rows took 2.05 s in a fresh process, 1.33 s the second time in the
same one, 1.36 s the first time with the pad. `anvil postprocess` does not call it: its
children stream their rows as they go and it builds few blocks (1M rows 3.93-4.02 s with
it, 3.99-4.09 s without, but 994 MiB of peak RSS against 795). Off glibc it does nothing.
"""

from __future__ import annotations

import ctypes

M_TOP_PAD, M_MMAP_THRESHOLD = -2, -3  # glibc's mallopt parameters
TOP_PAD_BYTES = 64 * 2**20
MMAP_THRESHOLD_BYTES = 32 * 2**20  # glibc's largest


def keep_freed_memory() -> None:
    """Keep `TOP_PAD_BYTES` of freed memory at the top of the C heap, and blocks up to
    `MMAP_THRESHOLD_BYTES` in it (see above)."""
    try:  # the process's own symbols (dlopen(NULL)): no library search
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mallopt(M_TOP_PAD, TOP_PAD_BYTES)
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
