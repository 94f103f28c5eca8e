"""OpenVINO's conversions send no usage reports: openvino_telemetry is never loaded where gpen_core runs OpenVINO."""

from __future__ import annotations

from importlib import metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpen_core.runtimes.openvino.base import openvino_version

from .conftest import ROOT

pytestmark = pytest.mark.skipif(openvino_version() is None, reason="needs OpenVINO (in requirements.txt)")

CONVERT = """
import os, sys
forks = []
real_fork = os.fork
os.fork = lambda: forks.append(1) or real_fork()
{first}
import openvino as ov
import openvino.tools.ovc.convert_impl as convert_impl
import torch
if {convert}:
    ov.convert_model(torch.nn.Conv2d(3, 4, 3).eval(), example_input=torch.zeros(1, 3, 8, 8))
try:
    import openvino_telemetry  # noqa: F401
    importable = True
except ImportError:
    importable = False
print(convert_impl.tm.__name__, importable, len(forks))
"""


def _run(first: str, home: Path, convert: bool) -> list[str]:
    # No CI variables (OpenVINO's telemetry stays quiet in CI by itself) and a HOME without an
    # opt-out file: the state a user's machine is in out of the box.
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TF_BUILD", "JENKINS_URL")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", CONVERT.format(first=first, convert=convert)], capture_output=True, text=True, env=env,
                         cwd=str(ROOT), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_a_conversion_after_gpen_core_uses_openvinos_own_stub_and_forks_nothing(tmp_path: Path) -> None:
    try:
        metadata.version("openvino-telemetry")  # not find_spec: this process has already blocked the import
    except metadata.PackageNotFoundError:
        pytest.skip("openvino-telemetry is not installed here: nothing to turn off")
    # OpenVINO alone would report through the real package (no consent file counts as consent);
    # it is only imported here, not run: a conversion would send a report
    (tmp_path / "alone").mkdir()
    (tmp_path / "ours").mkdir()
    assert _run("pass", tmp_path / "alone", convert=False)[0] == "openvino_telemetry"
    module, importable, forks = _run("import gpen_core.runtimes.openvino.base", tmp_path / "ours", convert=True)
    assert module == "openvino.tools.ovc.telemetry_stub"
    assert importable == "False" and forks == "0"
