"""Process-level resource helpers shared by every stage (no stage imports another for these)."""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def paused_gc():
    """Lowering and the order builders allocate hundreds of thousands of long-lived objects
    and no cycles; the cyclic collector would rescan them again and again (a third of the
    time on 100,000 tasks)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
