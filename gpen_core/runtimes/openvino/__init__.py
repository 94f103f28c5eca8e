"""OpenVINO on the CPU: one base (convert, cache, load), and the generator, parser and detector on it."""

import sys

# OpenVINO's conversion reports each use to Google Analytics through openvino_telemetry unless the user
# opted out, forking a process per event (which, offline, hang on after their parent exits). Every OpenVINO
# module falls back to a no-op stub when it cannot import it, so it is made unimportable here, before
# OpenVINO is first imported (only inside this package). A program that imported it before us keeps it.
if "openvino_telemetry" not in sys.modules:
    sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]
