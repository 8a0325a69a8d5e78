"""deploy/compose.yaml cannot be brought up here (no Docker daemon): check what can be checked without one.
Every command parses as an `auditor` subcommand, every AUDITOR_* variable is a setting some process reads,
and the services the recipe promises are there."""

from __future__ import annotations

from pathlib import Path

import yaml

from auditor.cli import build_parser
from auditor.jobs.settings import WorkerSettings
from auditor.settings import Settings

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_the_recipe_has_postgres_redis_two_workers_and_the_service() -> None:
    services = _compose()["services"]
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    workers = [s for s in services.values() if s.get("command", [None, None])[:2] == ["auditor", "worker"]]
    assert len(workers) == 2
    assert services["api"]["command"][:2] == ["auditor", "serve"]
    assert services["migrate"]["command"] == ["auditor", "db", "upgrade"]


def test_every_auditor_command_parses() -> None:
    parser = build_parser()
    for name, service in _compose()["services"].items():
        command = service.get("command")
        if command and command[0] == "auditor":
            parser.parse_args(command[1:])      # SystemExit on an unknown subcommand or flag
            assert name


def test_every_auditor_variable_is_a_setting() -> None:
    known = {f"AUDITOR_{name.upper()}" for name in Settings.model_fields}
    known |= {f"AUDITOR_WORKER_{name.upper()}" for name in WorkerSettings.model_fields}
    environment = _compose()["x-auditor"]["environment"]
    unknown = sorted(k for k in environment if k.startswith("AUDITOR_") and k not in known)
    assert not unknown, unknown


def test_the_mounted_model_registry_is_valid() -> None:
    from auditor.serving.registry import read_entries

    read_entries(DEPLOY / "models.yaml", None)


def test_the_service_signs_regulator_bundles_with_a_mounted_key() -> None:
    # production exports no bundle without an Ed25519 key: the recipe mounts one read-only where the setting points
    auditor = _compose()["x-auditor"]
    path = auditor["environment"]["AUDITOR_SIGNING_KEY_FILE"]
    assert any(volume.split(":")[1] == path and volume.endswith(":ro") for volume in auditor["volumes"]
               if isinstance(volume, str))
