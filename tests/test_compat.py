"""The third-party seams of gpen_core.compat: each fails loudly when the internals it reaches into change.

A seam patches or imports something its library does not promise to keep (Gradio's
``Image.preprocess``, Ray's private modules, the torchvision names facexlib imports).
These tests read the installed library and assert that exactly what the seam relies on
is still there, so an upgrade breaks here, by name, instead of quietly in production.
"""

from __future__ import annotations

import ast
import base64
import inspect
import json
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpen_core.compat import versions

from .conftest import ROOT

# ------------------------------------------------------------------ versions


def test_a_release_outside_the_range_warns_naming_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "installed", lambda dist: "5.9.1")
    monkeypatch.setattr(versions, "_WARNED", set())
    with pytest.warns(versions.UnsupportedVersionWarning, match=r"written for gradio >= 6\.0, < 7\.0; gradio 5\.9\.1"):
        assert versions.check_version("gradio", ((6, 0), (7, 0)), "the seam") == "5.9.1"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process and seam: a second call is quiet
        versions.check_version("gradio", ((6, 0), (7, 0)), "the seam")


def test_version_strings_parse_to_their_leading_numbers() -> None:
    assert versions.parse("6.31.0") == (6, 31, 0)
    assert versions.parse("2.60.0rc1") == (2, 60, 0)
    assert versions.parse("2.13.0+cpu") == (2, 13, 0)


# -------------------------------------------------------------------- gradio


def test_the_gradio_internals_the_upload_seam_uses_are_there() -> None:
    from gpen_app import gradio_seam as seam

    assert seam.seam_problems() == []
    lo, hi = seam.GRADIO_VERSIONS
    assert lo <= versions.parse(versions.installed("gradio") or "0") < hi


def test_the_upload_seam_refuses_to_install_when_preprocess_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    import gradio as gr

    from gpen_app import gradio_seam as seam

    monkeypatch.setattr(gr.Image, "preprocess", lambda self, payload, extra=None: None)
    with pytest.raises(RuntimeError, match=r"gr\.Image\.preprocess takes \['self', 'payload', 'extra'\]"):
        seam.raw_upload(gr.Image(type="filepath"), str)


def test_raw_upload_hands_over_the_path_unopened_and_a_paste_as_our_file(tmp_path: Path) -> None:
    import gradio as gr

    from gpen_app import gradio_seam as seam
    from gpen_app.uploads import save_data_url

    image = seam.raw_upload(gr.Image(type="filepath"), lambda url: str(save_data_url(url, tmp_path)))
    assert image.preprocess(SimpleNamespace(path="/uploads/x.png", url=None)) == "/uploads/x.png"
    assert image.preprocess(None) is None
    pasted = image.preprocess(SimpleNamespace(path=None, url="data:image/png;base64," + base64.b64encode(b"\x89PNG bytes").decode()))
    assert Path(pasted).read_bytes() == b"\x89PNG bytes" and Path(pasted).is_relative_to(tmp_path)
    with pytest.raises(gr.Error) as e:
        image.preprocess(SimpleNamespace(path=None, url="data:text/plain,hello"))
    assert e.value.title == "Cannot use this input" and e.value.message.startswith("Cannot use this input. The pasted image")


@pytest.mark.parametrize(
    ("headers", "page"),
    [
        ({"host": "127.0.0.1:7860", "origin": "http://127.0.0.1:7860"}, True),
        ({"Host": "gpen.example", "Referer": "https://gpen.example/?view=api"}, True),
        ({"host": "10.0.0.5:7860", "x-forwarded-host": "me-gpen.hf.space", "origin": "https://me-gpen.hf.space"}, True),
        ({"host": "127.0.0.1:7860"}, False),  # gradio_client, curl: no origin at all
        ({"host": "127.0.0.1:7860", "origin": "http://evil.example"}, False),
        ({"host": "127.0.0.1:7860", "origin": "null"}, False),
        (None, False),
    ],
)
def test_page_calls_are_told_apart_by_their_origin(headers: dict[str, str] | None, page: bool) -> None:
    from gpen_app.gradio_seam import came_from_page

    assert came_from_page(headers) is page


def test_a_proxy_that_rewrites_host_is_told_where_the_page_is() -> None:
    """The share tunnel or a reverse proxy may send Host: 127.0.0.1:7860 for a page served elsewhere."""
    from gpen_app.gradio_seam import came_from_page

    headers = {"host": "127.0.0.1:7860", "origin": "https://abc123.gradio.live"}
    assert came_from_page(headers) is False
    assert came_from_page(headers, {"abc123.gradio.live"}) is True


# ----------------------------------------------------------------------- ray


def test_the_ray_internals_the_loopback_seam_uses_are_there() -> None:
    ray = pytest.importorskip("ray", reason="Ray is optional (requirements-ray.txt)")
    from ray._private import ray_constants
    from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
    from ray.serve._private import replica

    from gpen_core.compat.ray import RAY_VERSIONS

    lo, hi = RAY_VERSIONS
    assert lo <= versions.parse(ray.__version__) < hi, f"gpen_core.compat.ray was written for ray {RAY_VERSIONS}"
    assert isinstance(ray_constants.ENABLE_RAY_CLUSTER, bool)
    assert "warn_if_disabled" in inspect.signature(maybe_enable_token_auth_if_token_available).parameters
    assert list(inspect.signature(replica.add_port_to_grpc_server).parameters) == ["server", "address"]
    # What the patch is for: Serve still binds the replica's gRPC server to every interface through it.
    assert 'add_port_to_grpc_server(self._server, "[::]:0")' in inspect.getsource(replica)


def test_replica_grpc_is_moved_to_loopback_on_a_loopback_node(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray", reason="Ray is optional (requirements-ray.txt)")
    from ray.serve._private import replica

    from gpen_core.compat.ray import keep_replica_grpc_on_loopback

    bound: list[str] = []
    monkeypatch.setattr(replica, "add_port_to_grpc_server", lambda server, address: bound.append(address) or 4321)
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    keep_replica_grpc_on_loopback()
    keep_replica_grpc_on_loopback()  # idempotent: not wrapped twice
    assert replica.add_port_to_grpc_server(None, "[::]:0") == 4321
    assert bound == ["127.0.0.1:0"]


def test_the_replica_seam_fails_loudly_when_the_function_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray", reason="Ray is optional (requirements-ray.txt)")
    from ray.serve._private import replica

    from gpen_core.compat.ray import keep_replica_grpc_on_loopback

    monkeypatch.delattr(replica, "add_port_to_grpc_server")
    with pytest.raises(RuntimeError, match="add_port_to_grpc_server is gone"):
        keep_replica_grpc_on_loopback()


# --------------------------------------------------------------- torchvision


def _torchvision_imports(package: Path) -> tuple[set[tuple[str, str]], set[str], set[str]]:
    """(module, name) of every ``from torchvision... import``, every ``import torchvision...``, and every
    ``torchvision.x.y`` attribute used, in the facexlib modules gpen_core imports."""
    froms: set[tuple[str, str]] = set()
    imports: set[str] = set()
    attrs: set[str] = set()
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchvision"):
                froms |= {(node.module, a.name) for a in node.names}  # type: ignore[misc]
            elif isinstance(node, ast.Import):
                imports |= {a.name for a in node.names if a.name.startswith("torchvision")}
            elif isinstance(node, ast.Attribute) and ast.unparse(node).startswith("torchvision."):
                attrs.add(ast.unparse(node))
    return froms, imports, attrs


def test_facexlib_imports_only_what_the_stand_ins_provide() -> None:
    import importlib.util

    from gpen_core.compat import torchvision as tv

    spec = importlib.util.find_spec("facexlib")  # found, not imported: importing it needs torchvision
    assert spec is not None and spec.submodule_search_locations

    lo, hi = tv.FACEXLIB_VERSIONS
    assert lo <= versions.parse(versions.installed("facexlib") or "0") < hi
    froms, imports, attrs = _torchvision_imports(Path(list(spec.submodule_search_locations)[0]) / "detection")
    provided = {(m, n) for m, names in tv.FACEXLIB_NEEDS.items() for n in names}
    assert froms and froms <= provided, f"facexlib's detector now imports {sorted(froms - provided)} from torchvision"
    assert imports <= {"torchvision", "torchvision.models"}, imports
    assert attrs <= {"torchvision.ops", "torchvision.ops.nms"}, attrs  # ast sees both levels of torchvision.ops.nms
    # The stand-in modules hold every name facexlib takes.
    stubs = tv._modules()
    for module, names in tv.FACEXLIB_NEEDS.items():
        assert all(hasattr(stubs[module], n) for n in names), module


_THREADS = r"""
import builtins, json, sys, threading
from gpen_core.compat import torchvision as tv
inside, release, out = threading.Event(), threading.Event(), {}
def owner():
    with tv.for_facexlib() as used:
        import torchvision.ops as ops
        from torchvision.models._utils import IntermediateLayerGetter
        out["owner"] = used and tv.is_shim(ops) and IntermediateLayerGetter is tv.IntermediateLayerGetter
        inside.set()
        release.wait(30)
t = threading.Thread(target=owner)
t.start()
inside.wait(30)
try:  # this thread imports torchvision while the other is inside the block
    import torchvision
    out["other"] = "stand-in" if tv.is_shim(torchvision) else "real"
except ImportError:
    out["other"] = "not installed"
release.set()
t.join()
out["stand-ins left in sys.modules"] = [k for k, m in sys.modules.items() if k.startswith("torchvision") and tv.is_shim(m)]
out["import restored"] = not getattr(builtins.__import__, "__gpen_tv_shim__", False)
print(json.dumps(out))
"""


def test_another_thread_never_gets_the_stand_ins() -> None:
    """While one thread builds facexlib's detector, another importing torchvision gets the real package
    (or its ImportError), never a stand-in; nothing is left behind."""
    run = subprocess.run([sys.executable, "-c", _THREADS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["owner"] is True
    assert out["other"] in ("real", "not installed"), out
    assert out["stand-ins left in sys.modules"] == [] and out["import restored"] is True


def test_a_pasted_image_over_the_limit_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    from gpen_core.errors import InputError
    from gpen_core.images.limits import InputLimits
    from gpen_app.uploads import save_data_url

    url = "data:image/png;base64," + "A" * 4_000_000  # 3 MB of bytes once decoded
    with pytest.raises(InputError, match=r"^The file is 3(\.0)? MB; the limit is 2(\.0)? MB"):
        save_data_url(url, tmp_path, InputLimits(max_file_bytes=2_000_000))
    assert not any(tmp_path.iterdir())  # nothing written
