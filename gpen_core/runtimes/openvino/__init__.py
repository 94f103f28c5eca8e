"""OpenVINO on the CPU: one base (convert, cache, load), and the generator, parser and detector on it."""

import sys

# OpenVINO's model conversion reports each use to Google Analytics through the
# openvino_telemetry package unless the user has opted out (no consent file counts as
# consent), forking a process per event: from a user's machine, unasked, and, on a machine
# without internet, forked workers that hang on after their parent exits. Every OpenVINO
# module that imports it falls back to OpenVINO's own no-op stub when it cannot be imported,
# so it is made unimportable in this process before OpenVINO is first imported (every import
# of OpenVINO in gpen_core is inside this package). A program that imported it before us
# keeps it: that is its own choice.
if "openvino_telemetry" not in sys.modules:
    sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]
