"""A real `auditor serve` in a subprocess, on 127.0.0.1 and a fresh SQLite file, with settings of its own
(`AUDITOR_KG_CONSTRAINT`, `AUDITOR_ENGINE_MAX_NUM_SEQS`, ...): what `loadgen --sweep` measures each
configuration on. The server runs in development mode (no keys) with /metrics open, in a scratch folder."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


class ServerFailed(RuntimeError):
    """The server exited or did not become ready; the message names its log."""


@dataclass
class LaunchedServer:
    proc: subprocess.Popen[bytes]
    base_url: str
    workdir: Path
    ready_s: float

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> LaunchedServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def launch(env: dict[str, str], *, ready_timeout_s: float = 600.0, workdir: Path | None = None) -> LaunchedServer:
    """Start `auditor serve` with these AUDITOR_* overrides and wait for /ready."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="auditor-loadgen-"))
    port = free_port()
    # The KG-constraint index cache is shared with this checkout's (a relative default would put it in the scratch
    # folder): every configuration but the first then starts warm instead of rebuilding the indices.
    cache = os.environ.get("AUDITOR_INDEX_CACHE_DIR") or str(Path("var/cache/kg-index").resolve())
    child_env = {**os.environ, "AUDITOR_ENVIRONMENT": "development", "AUDITOR_HOST": "127.0.0.1",
                 "AUDITOR_DATABASE_URL": f"sqlite:///{workdir / 'audit.db'}", "AUDITOR_METRICS_ACCESS": "open",
                 "AUDITOR_INDEX_CACHE_DIR": cache, **env}
    log_path = workdir / "server.log"
    started = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "auditor.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                                cwd=workdir, env=child_env, stdout=log, stderr=subprocess.STDOUT)
    server = LaunchedServer(proc, f"http://127.0.0.1:{port}", workdir, 0.0)
    wait_until_ready(proc, server.base_url, timeout_s=ready_timeout_s, log_path=log_path, stop=server.stop)
    server.ready_s = time.perf_counter() - started
    return server


def wait_until_ready(proc: subprocess.Popen[bytes], base_url: str, *, timeout_s: float, log_path: Path,
                     stop: Any, poll_s: float = 0.1, warm: bool = False) -> None:
    """Poll `/ready` until it answers 200 (and with `warm`, until it also says warm: what loads after ready
    is in); ServerFailed (naming the log) if the process exits first or the time runs out (then `stop()`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ServerFailed(f"the server exited with status {proc.returncode}; see {log_path}")
        try:
            response = httpx.get(f"{base_url}/ready", timeout=2)
            if response.status_code == 200 and (not warm or response.json().get("warm", True)):
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            stop()
            raise ServerFailed(f"the server was not ready after {timeout_s:.0f} s; see {log_path}")
        time.sleep(poll_s)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
