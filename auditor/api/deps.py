"""What the lifespan builds once and every router reads from `request.app.state.services`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from auditor.serving.inference import InferenceService
from auditor.serving.metrics import ServiceMetrics
from auditor.settings import Settings
from auditor.store.database import Database


@dataclass(slots=True)
class Services:
    settings: Settings
    database: Database
    engine: Any
    inference: InferenceService
    metrics: ServiceMetrics
    ready: bool = False


def get_services(request: Request) -> Services:
    return request.app.state.services


def get_request_settings(request: Request) -> Settings:
    """The app's settings as a dependency (tests build apps with their own Settings)."""
    return request.app.state.services.settings
