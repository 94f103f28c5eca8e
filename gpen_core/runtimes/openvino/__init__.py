"""OpenVINO on the CPU: one base (convert, cache, load), and the generator, parser and detector on it."""

import sys

# OpenVINO's conversion reports each use through openvino_telemetry, forking a process per event (offline they hang
# on after their parent exits); OpenVINO stubs it out when it cannot be imported. A program that imported it first
# keeps it.
if "openvino_telemetry" not in sys.modules:
    sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]
