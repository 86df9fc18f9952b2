"""Peak memory of one run in a process that runs several: the resident-set peak reset before it and read after
(Linux's ``/proc/self/clear_refs`` and ``VmHWM``; elsewhere the process's lifetime peak), and the GPU's
allocator peak when one is used."""

from __future__ import annotations

import re
import resource
import sys
from pathlib import Path

_STATUS, _CLEAR = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def reset_peak() -> None:
    """Start a new peak: the resident set's (Linux) and the GPU allocator's."""
    try:
        _CLEAR.write_text("5")  # 5: reset the peak resident set size to the current one
    except OSError:
        pass  # not Linux, or not allowed: the lifetime peak is read instead
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def current_mib() -> float | None:
    """The resident set now (Linux; None elsewhere)."""
    try:
        return round(int(re.search(r"VmRSS:\s+(\d+)", _STATUS.read_text()).group(1)) / 1024, 1)
    except (OSError, AttributeError):
        return None


def peak_mib() -> dict:
    """``{"rss_mib": ...}`` since :func:`reset_peak` (``gpu_mib`` too when a GPU is used)."""
    try:
        kib = int(re.search(r"VmHWM:\s+(\d+)", _STATUS.read_text()).group(1))
    except (OSError, AttributeError):
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux; the lifetime peak
    out = {"rss_mib": round(kib / 1024, 1)}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        out["gpu_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out
