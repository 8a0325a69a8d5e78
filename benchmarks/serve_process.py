"""`auditor serve` in a subprocess: the upstream of the upstream tests and benchmarks, or the service itself.

Real HTTP, a real engine, a real audit store of its own. The faults the tests need are real too: SIGSTOP
makes it stall (slow), SIGKILL makes it die mid-answer, and a model folder whose chat template raises
makes it answer 500. `model_folder` writes copies of the bundled model with such changes; weights are
untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
BUNDLED_MODEL = REPO / "auditor" / "bundled_model"
START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def model_folder(target: Path, *, never_stop: bool = False, broken_template: bool = False) -> Path:
    """A copy of the bundled model. `never_stop`: EOS becomes the pad token, so the model writes sentence
    after sentence until max_tokens (a long stream to kill). `broken_template`: rendering the chat
    template raises ZeroDivisionError, an unhandled error: the server answers 500."""
    shutil.copytree(BUNDLED_MODEL, target)
    if never_stop:
        for name in ("config.json", "generation_config.json"):
            config = json.loads((target / name).read_text())
            config["eos_token_id"] = config["pad_token_id"]
            (target / name).write_text(json.dumps(config))
    tokenizer_config = json.loads((target / "tokenizer_config.json").read_text())
    if never_stop:
        tokenizer_config["eos_token"] = "<pad>"
    if broken_template:
        tokenizer_config["chat_template"] = "{{ bos_token }}{{ 1 / 0 }}"
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return target


class ServeProcess:
    """`auditor serve` in a subprocess; always stopped by `stop()` (tests call it in a finally)."""

    def __init__(self, workdir: Path, *, model_path: Path = BUNDLED_MODEL, api_key: bool = False,
                 database_url: str | None = None, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.model_path = model_path
        self.port = free_port()
        self.database_url = database_url or f"sqlite:///{workdir / 'upstream.db'}"
        inherited = {k: v for k, v in os.environ.items() if k not in ("AUDITOR_MODELS_FILE", "AUDITOR_REDIS_URL")}
        self.env = {**inherited, "AUDITOR_DATABASE_URL": self.database_url, "AUDITOR_MODEL_PATH": str(model_path),
                    "AUDITOR_DOMAINS": "[]", "AUDITOR_ENVIRONMENT": "development", "AUDITOR_MODELS": "{}",
                    "AUDITOR_SQLITE_SYNCHRONOUS": "NORMAL",
                    "AUDITOR_ENGINE_PROCESS": "false",   # one process: SIGSTOP / SIGKILL reach the whole server
                    **(env or {})}
        self.key = self._create_key() if api_key else None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _create_key(self) -> str:
        out = subprocess.run([sys.executable, "-m", "auditor.cli", "keys", "create", "--tenant", "upstream",
                              "--role", "client"], env=self.env, cwd=REPO, capture_output=True, text=True,
                             timeout=120, check=True).stdout
        return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("key: "))

    def start(self) -> ServeProcess:
        log = (self.workdir / "serve.log").open("ab")
        self.process = subprocess.Popen([sys.executable, "-m", "auditor.cli", "serve", "--port", str(self.port)],
                                        env=self.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"upstream exited with {self.process.returncode}: {self.log_tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"upstream did not become healthy in {START_TIMEOUT_S}s: {self.log_tail()}")

    def log_tail(self) -> str:
        path = self.workdir / "serve.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def pause(self) -> None:
        """SIGSTOP: the process holds its connections open and answers nothing (a stalled upstream)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: the kernel closes its sockets mid-answer."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
