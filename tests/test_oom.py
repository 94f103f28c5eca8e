"""Out of memory under a real, artificially small memory budget (RLIMIT_AS) on CPU.

The budget is applied in a child process: quality mode (GPEN-BFR-512) cannot
fit, so the engine must free what it allocated, step down openly, succeed, and
serve the next request normally.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import json, re, resource, sys
    import numpy as np
    from gpen_core.errors import ResourceError
    from gpen_core.restorer import Restorer, RestoreOptions

    def vmsize():
        return int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024

    r = Restorer(device="cpu", synthetic_weights=True)
    face = np.zeros((512, 512, 3), np.uint8)
    r(face, RestoreOptions(mode="low", aligned=True))   # imports and threads exist before the cap
    r.unload()
    budget = int(float(sys.argv[1]))
    limit = vmsize() + budget
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    out = {}
    try:
        res = r(face, RestoreOptions(mode=sys.argv[2], aligned=True))
        out["first"] = {"mode": res.mode.name, "notes": list(res.notes), "checkpoint": res.checkpoint}
    except ResourceError as e:
        out["first"] = {"error": str(e)}
    if sys.argv[3] == "lift":  # the machine got memory back (another program closed)
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    res = r(face, RestoreOptions(mode="low", aligned=True))
    out["next"] = {"mode": res.mode.name, "faces": len(res.faces), "notes": list(res.notes)}
    print("RESULT " + json.dumps(out))
    """
)


def _run(budget_bytes: float, mode: str, lift: bool = False) -> dict:
    env = dict(os.environ, GPEN_FREE_RAM_BYTES=str(64e9), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", CHILD, str(budget_bytes), mode, "lift" if lift else "keep"], capture_output=True, text=True, env=env, timeout=300)
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, f"child failed (rc {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return json.loads(line[len("RESULT ") :])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS memory budgets need Linux")
def test_oom_steps_down_to_a_mode_that_fits_and_the_next_request_runs() -> None:
    out = _run(450e6, "quality")
    first = out["first"]
    assert "error" not in first, first
    assert first["mode"] == "low"
    assert any("ran out of memory in quality" in n for n in first["notes"])
    assert out["next"] == {"mode": "low", "faces": 1, "notes": out["next"]["notes"]}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS memory budgets need Linux")
def test_oom_in_the_lightest_mode_is_a_clear_error_and_the_server_survives() -> None:
    out = _run(20e6, "low", lift=True)
    assert "out of memory" in out["first"]["error"] and "server is still running" in out["first"]["error"]
    assert out["next"]["mode"] == "low"
