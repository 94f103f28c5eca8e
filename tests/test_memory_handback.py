"""What the process hands back when a lighter mode takes over, seen from the libraries themselves:
oneDNN's own log of its primitive cache, and glibc's own count of mapped blocks. Each check runs
in a child process, so this session's heap and oneDNN cache are left as they are."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and libtorch_cpu.so are Linux's")


def _child(code: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@linux_only
def test_clearing_onednns_cache_makes_the_next_convolution_build_its_kernel_again() -> None:
    # oneDNN's verbose log says, for every primitive it creates, whether its cache had it.
    out = _child(
        """
        import torch
        torch.set_num_threads(1)
        from gpen_core.compat import onednn
        x, w = torch.randn(1, 64, 64, 64), torch.randn(64, 64, 3, 3)
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON_CREATION):
            for _ in range(2):
                torch.nn.functional.conv2d(x, w, padding=1)
            print("cleared", onednn.clear_primitive_cache(), flush=True)
            for _ in range(2):
                torch.nn.functional.conv2d(x, w, padding=1)
        print("capacity", onednn.primitive_cache_capacity(), flush=True)
        """
    )
    convs = [line.split(",")[3] for line in out.stdout.splitlines()
             if line.startswith("onednn_verbose") and ",convolution," in line and ",create:" in line]
    assert "cleared True" in out.stdout, out.stdout[-2000:]
    # Built, reused; emptied: built again, then reused (the cache still caches: its capacity is back).
    assert convs == ["create:cache_miss", "create:cache_hit", "create:cache_miss", "create:cache_hit"], convs
    assert "capacity 1024" in out.stdout  # oneDNN's default capacity, as it was before the clear


_MAPPED_2MIB = """
        import ctypes, json
        libc = ctypes.CDLL("libc.so.6")
        if not hasattr(libc, "mallinfo2"):
            print(json.dumps(None)); raise SystemExit
        class Info(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
        libc.mallinfo2.restype = Info
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]

        def mapped_2mib():
            # Whether a 2 MiB block gets a mapping of its own now (else it comes from the heap).
            before = libc.mallinfo2().hblkhd
            block = libc.malloc(2 << 20)
            mapped = libc.mallinfo2().hblkhd - before >= 2 << 20
            libc.free(block)
            return mapped

        # A freed 8 MiB mapped block raises glibc's own threshold to 8 MiB, as a request's first buffers do.
        libc.free(libc.malloc(8 << 20))
"""


@linux_only
@pytest.mark.parametrize("threshold", ["MAPPED_FROM", "HEAP_UP_TO", None])
def test_a_2_mib_buffer_is_mapped_on_its_own_only_under_the_heavier_modes_policy(threshold: str | None) -> None:
    out = _child(
        _MAPPED_2MIB
        + f"""
        from gpen_core.platform import heap
        applied = heap.map_blocks_from(getattr(heap, {threshold!r})) if {threshold!r} else None
        print(json.dumps({{"applied": applied, "mapped": mapped_2mib()}}))
        """
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got is None:
        pytest.skip("this C library is not glibc >= 2.33 (no mallinfo2)")
    if threshold == "MAPPED_FROM":  # the heavier modes' policy: its own mapping, unmapped when freed
        assert got == {"applied": True, "mapped": True}, got
    elif threshold == "HEAP_UP_TO":  # low's: from the heap, as glibc does by itself once warmed up
        assert got == {"applied": True, "mapped": False}, got
    else:  # glibc's own behaviour, which the first case changes
        assert got["mapped"] is False, got


@linux_only
@pytest.mark.parametrize("policy", [None, "MAPPED_FROM"])
def test_a_network_loads_with_its_big_blocks_mapped_then_the_process_keeps_its_policy(policy: str | None) -> None:
    # The model cache's own load path, with a build that only allocates: what a checkpoint's transient
    # copies would get while the network loads, and what the request's buffers get after it.
    out = _child(
        _MAPPED_2MIB
        + f"""
        from gpen_core.engine.model_cache import Held, ModelCache
        from gpen_core.platform import heap
        if {policy!r}:
            heap.map_blocks_from(heap.MAPPED_FROM)  # the app's heavier modes set this before their request
        seen = {{"before": mapped_2mib()}}
        def build():
            seen["during"] = mapped_2mib()
            return object()
        ModelCache(synthetic_weights=True)._swap("generator", Held(("x",), None, "x", build), "cpu")
        seen["after"] = mapped_2mib()
        print(json.dumps(seen))
        """
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got is None:
        pytest.skip("this C library is not glibc >= 2.33 (no mallinfo2)")
    if policy is None:  # glibc's own threshold (8 MiB here) before; after the load its ceiling, 32 MiB
        assert got == {"before": False, "during": True, "after": False}, got
    else:  # the mode's policy stays
        assert got == {"before": True, "during": True, "after": True}, got


@linux_only
def test_two_loads_at_once_keep_big_blocks_mapped_until_both_end_then_the_process_policy_is_back() -> None:
    # Two visitors' requests loading at once: the first to end must not unmap the other's load, nor the
    # last to end leave the load's setting behind for every later request.
    out = _child(
        _MAPPED_2MIB
        + """
        from gpen_core.platform import heap
        seen = {}
        first, second = heap.loading_mapped(), heap.loading_mapped()
        first.__enter__(); second.__enter__()
        first.__exit__(None, None, None)
        seen["one still loading"] = mapped_2mib()
        second.__exit__(None, None, None)
        seen["none loading"] = mapped_2mib()
        print(json.dumps(seen))
        """
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got is None:
        pytest.skip("this C library is not glibc >= 2.33 (no mallinfo2)")
    assert got == {"one still loading": True, "none loading": False}, got
