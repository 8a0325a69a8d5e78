"""`auditor demo`: the whole service on one machine, no servers, no downloads, showing what it catches.

`service` starts the real app on the embedded defaults; `script` sends the ordinary scripted requests; four
scenes follow, each a module: `kg_constraint` (the same question with the KG constraint off and on),
`blocked` (a wrong answer the output gate blocks), `reaudit` (another LLM's answers imported, a new KG
version, a re-audit that changes their verdicts) and `tamper` (a tampered copy of the trail caught by
`auditor audit verify-chain`); `run` plays them in order and `render` prints the report.
"""

from auditor.demo.run import SCENE_DOMAINS, DemoReport, run_demo
from auditor.demo.script import SCRIPT, DemoResult, ScriptedRequest, scripted_requests
from auditor.demo.service import (
           DemoError,
           console_key,
           demo_settings,
           free_port,
           prepare_workdir,
           sqlite_path,
)

__all__ = ["SCENE_DOMAINS", "SCRIPT", "DemoError", "DemoReport", "DemoResult", "ScriptedRequest", "console_key", "demo_settings",
           "free_port", "prepare_workdir", "run_demo", "scripted_requests", "sqlite_path"]
