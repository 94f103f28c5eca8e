"""Two processes compiling one model at once race on OpenVINO's blob cache: the compile is retried, never failed."""

from __future__ import annotations

import pytest

from gpen_core.runtimes.openvino import base

RACE = RuntimeError("Exception from src/inference/src/cpp/core.cpp:132:\nfilesystem error: cannot set permissions: "
                    "No such file or directory [/m/openvino/x/compiled-f32/1.blob]")


class FakeCore:
    def __init__(self, failures: list[BaseException]) -> None:
        self.failures, self.configs = failures, []

    def compile_model(self, xml: str, device: str, config: dict) -> str:
        self.configs.append(dict(config))
        if self.failures:
            raise self.failures.pop(0)
        return "compiled"


@pytest.mark.parametrize("races", [1, 2])
def test_a_cache_race_is_retried_then_compiled_without_the_cache(races: int, monkeypatch: pytest.MonkeyPatch) -> None:
    core = FakeCore([RACE] * races)
    monkeypatch.setattr(base, "get_core", lambda: core)
    assert base.compile_cached("/m/model.xml", {"CACHE_DIR": "/m/c", "PERFORMANCE_HINT": "LATENCY"}) == "compiled"
    assert len(core.configs) == races + 1
    assert ("CACHE_DIR" in core.configs[-1]) == (races == 1)  # twice raced: the last compile skips the cache
    assert core.configs[-1]["PERFORMANCE_HINT"] == "LATENCY"


def test_any_other_compile_error_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    core = FakeCore([RuntimeError("Exception from src/plugins/intel_cpu: unsupported operation")])
    monkeypatch.setattr(base, "get_core", lambda: core)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        base.compile_cached("/m/model.xml", {"CACHE_DIR": "/m/c"})
    assert len(core.configs) == 1
