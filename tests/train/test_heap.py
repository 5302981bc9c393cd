"""openbook.train.heap: after map_large_blocks, a freed large block no longer raises glibc's mmap threshold, so
later blocks of a few megabytes still get mappings of their own (returned to the system when freed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from openbook.train import heap

# In a fresh process: free a 16 MiB block (glibc then serves blocks up to 16 MiB from the heap), then allocate
# 2 MiB and count the mapped blocks (mallinfo2's hblks) before and after.
PROBE = r"""
import ctypes, importlib.util, sys
spec = importlib.util.spec_from_file_location("heap", sys.argv[2])  # the module alone, without torch
heap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(heap)
if sys.argv[1] == "fixed":
    assert heap.map_large_blocks()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = Info
libc.free(libc.malloc(16 << 20))
before = libc.mallinfo2().hblks
block = libc.malloc(2 << 20)
print(libc.mallinfo2().hblks - before)
libc.free(block)
"""


@pytest.mark.skipif(heap._libc() is None, reason="glibc only")
def test_large_blocks_keep_their_own_mappings_after_a_larger_one_was_freed():
    def mapped(mode):
        out = subprocess.run([sys.executable, "-c", PROBE, mode, heap.__file__], capture_output=True, text=True,
                             check=True)
        return int(out.stdout.strip())

    assert mapped("default") == 0  # glibc's dynamic threshold: the 2 MiB block came from the heap
    assert mapped("fixed") == 1


def test_it_is_a_no_op_without_glibc(monkeypatch):
    monkeypatch.setattr(heap, "_libc", lambda: None)
    assert heap.map_large_blocks() is False
