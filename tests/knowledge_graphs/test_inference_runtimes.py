"""MiniLM's runtimes send no usage telemetry and write nothing in the user's home.

ONNX Runtime (on Linux since 1.2x) and OpenVINO's converter report usage to their vendors as they load, and each
leaves an identifier in the home folder as it does (the module's docstring has the details). Each case runs in a
fresh interpreter with an empty HOME, as a first start on a new machine would, and loads the encoder on every
backend. The control runs the runtimes as a plain import would, to show that the check sees what it looks for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from knowledge_graphs.inference_runtimes import ONNXRUNTIME_OPT_OUT

PROBE = """
import json, os, sys
{load}
print(json.dumps({{"telemetry_modules": sorted(m for m in sys.modules if "telemetry" in m),
                   "onnxruntime_opt_out": os.environ.get("{opt_out}")}}))
"""

ENCODE_ON_EVERY_BACKEND = """
from knowledge_graphs.minilm import MiniLMEncoder, model_path
for backend in ("onnxruntime", "openvino"):
    assert MiniLMEncoder(model_path(), backend=backend, dtype="float32").encode(["warfarin and aspirin"]).shape == (1, 384)
"""

PLAIN_IMPORTS = """
import tempfile, onnx, onnxruntime, openvino, time
from knowledge_graphs.minilm import MiniLMEncoder, model_path
from knowledge_graphs.minilm_onnx import build_model
with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
    f.write(build_model(MiniLMEncoder(model_path(), backend="numpy"))); f.flush()
    onnxruntime.InferenceSession(f.name, providers=["CPUExecutionProvider"])
time.sleep(1)   # OpenVINO's converter sends from a thread
"""


def _run(tmp_path: Path, load: str) -> tuple[dict, list[str]]:
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key != ONNXRUNTIME_OPT_OUT and not key.startswith(("CI", "OPENVINO"))}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), PYTHONPATH=str(Path(__file__).parents[2]))
    done = subprocess.run([sys.executable, "-c", PROBE.format(load=load, opt_out=ONNXRUNTIME_OPT_OUT)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    written = sorted(str(path.relative_to(home)) for path in home.rglob("*"))
    return json.loads(done.stdout.strip().splitlines()[-1]), written


def test_loading_the_encoder_on_every_backend_sends_no_telemetry_and_writes_nothing_at_home(tmp_path):
    seen, written = _run(tmp_path, ENCODE_ON_EVERY_BACKEND)
    assert written == []
    assert seen["telemetry_modules"] == []
    assert seen["onnxruntime_opt_out"] == "1"


def test_control_the_runtimes_imported_plainly_do_write_their_identifiers(tmp_path):
    seen, written = _run(tmp_path, PLAIN_IMPORTS)
    if not written and not seen["telemetry_modules"]:
        pytest.skip("these runtime versions no longer report usage on load: the check above has nothing to catch")
    assert written   # e.g. .cache/Microsoft/DeveloperTools/.onnxruntime/deviceid, intel/openvino_ga_cid
