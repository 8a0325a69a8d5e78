"""ONNX Runtime and OpenVINO, imported without their usage telemetry.

Both runtimes report usage to their vendors unless told not to, and both start as they load:
- ONNX Runtime (1.32 on Linux) creates a 1DS uploader with its environment: a process event goes to Microsoft's
  collector and a device id is written under ~/.cache/Microsoft, unless ORT_DISABLE_TELEMETRY is set before the
  import (its only full opt-out; `disable_telemetry_events()` comes after the first event).
- `import openvino` also imports its model converter (`openvino.tools.ovc`, inside a try/except ImportError), and
  that import sends an event to Google Analytics from a background thread and writes a client id and a counter
  under ~/intel, unless the user opted out in a file in their home.
This service holds prompts and answers of finance, medicine and law: it makes no call out that its operator did
not configure, and writes nothing outside its own folders. It needs only the runtimes (it writes the graph
itself), so the converter is never imported here and ONNX Runtime is told before it loads.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

ONNXRUNTIME_OPT_OUT = "ORT_DISABLE_TELEMETRY"
OPENVINO_CONVERTER = "openvino.tools.ovc"


def import_onnxruntime() -> ModuleType:
    """ONNX Runtime with its telemetry off from the start."""
    if "onnxruntime" not in sys.modules:
        os.environ[ONNXRUNTIME_OPT_OUT] = "1"   # read once, as the runtime's environment is created
    import onnxruntime  # noqa: PLC0415 - only where this backend is used

    onnxruntime.disable_telemetry_events()      # the rest, where something else imported it first
    return onnxruntime


def import_openvino() -> ModuleType:
    """OpenVINO's runtime, without its converter (and so without the converter's telemetry)."""
    if "openvino" not in sys.modules:
        sys.modules.setdefault(OPENVINO_CONVERTER, None)   # None in sys.modules: importing it raises ImportError
    import openvino  # noqa: PLC0415 - only where this backend is used

    return openvino
