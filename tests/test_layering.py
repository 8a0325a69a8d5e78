"""The layers import downward only: `lint-imports` checks the contracts in pyproject.toml, and this
test runs it so that pytest (the README's test command, and so CI) fails on a violation."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import knowledge_graphs

REPO_ROOT = Path(__file__).resolve().parent.parent
# the venv's own script, beside the interpreter running the tests (not resolved: a venv's python is a link)
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def test_import_contracts_are_kept() -> None:
    assert LINT_IMPORTS.is_file(), f"{LINT_IMPORTS} missing: install the dev extras (pip install -e '.[dev]')"
    result = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, f"lint-imports found a layering violation:\n{result.stdout}\n{result.stderr}"
    assert "0 broken" in result.stdout


def test_the_contracts_say_what_the_architecture_says() -> None:
    """A contract loosened to make lint-imports pass would make the test above meaningless."""
    contracts = _contracts()
    assert contracts["layers"]["layers"] == ["auditor", "rules", "knowledge_graphs", "engine"]
    assert set(contracts["engine-alone"]["forbidden_modules"]) == {"knowledge_graphs", "rules", "auditor"}
    assert set(contracts["rules-no-service"]["forbidden_modules"]) >= {
        "sqlalchemy", "fastapi", "starlette", "httpx", "psycopg", "celery", "redis", "uvicorn"}
    assert contracts["kg-decoding-only"]["forbidden_modules"] == ["engine"]
    # every module of knowledge_graphs but decoding is a source of that contract, new ones included
    outside_decoding = {f"knowledge_graphs.{m.name}" for m in pkgutil.iter_modules(knowledge_graphs.__path__)
                        if m.name != "decoding"}
    assert set(contracts["kg-decoding-only"]["source_modules"]) == outside_decoding
    for contract in contracts.values():
        assert not contract.get("ignore_imports") and not contract.get("allow_indirect_imports"), contract["id"]
