"""A real checkpoint file does not stay mapped once the fast forward is prepared.

``load_generator`` memory-maps the file; a prepared network that kept even one
tensor aliasing it would keep the whole file mapped and its pages resident (270 MB
for GPEN-BFR-512, measured). The checkpoint here is written from the shared key table
of the released GPEN-BFR-512, so every tensor has the released shape.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest
import torch

from .conftest import shared_path


def _from_key_table(table: Path, out: Path) -> Path:
    from gpen_core.networks.arch import make_kernel

    g = torch.Generator().manual_seed(0)
    sd = {}
    for line in table.read_text().splitlines()[1:]:
        key, shape, _kind = line.split("\t")
        dims = ast.literal_eval(shape)
        if key.endswith(".kernel"):  # the FIR buffers, as stored in the released files
            sd[key] = make_kernel([1, 3, 3, 1]) * (4 if key.startswith("generator.") else 1)
        else:
            sd[key] = torch.randn(dims, generator=g) * (0.1 if len(dims) <= 1 else 1.0)
    torch.save(sd, out)
    return out


def _mappings(path: Path) -> tuple[int, int] | None:
    """(number of mappings of ``path`` in this process, their resident kB); None off Linux."""
    smaps = Path("/proc/self/smaps")
    if not smaps.exists():
        return None
    count, total, inside = 0, 0, False
    target = str(path.resolve())
    for line in smaps.read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            inside = line.rstrip().endswith(target)
            count += inside
        elif inside and head and head[0] == "Rss:":
            total += int(head[1])
    return count, total


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_prepared_forward_keeps_no_part_of_the_checkpoint_file_mapped(tmp_path: Path, dtype: str) -> None:
    from gpen_core.networks.checkpoint import load_generator
    from gpen_core.networks.prepared import prepare
    from gpen_core.networks.plan import ForwardPlan

    if _mappings(tmp_path) is None:
        pytest.skip("needs /proc/self/smaps (Linux) to see the file's mappings")
    ckpt = _from_key_table(shared_path("reference", "keys_GPEN-BFR-512.tsv"), tmp_path / "GPEN-BFR-512.pth")
    model = load_generator(ckpt)  # mmap-backed
    assert model.config.size == 512
    assert _mappings(ckpt)[0] >= 1  # loading maps it: the check below can fail
    forward = prepare(model, ForwardPlan(dtype=dtype))  # bfloat16 plans are built on any CPU (not run here)
    assert _mappings(ckpt)[1] > 100_000  # preparing read every weight: ~280 MB of it resident
    del model
    gc.collect()
    assert _mappings(ckpt) == (0, 0), "a prepared tensor still aliases the mmap-loaded checkpoint"
    assert forward.size == 512
