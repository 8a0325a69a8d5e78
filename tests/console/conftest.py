"""Fixtures for the console: the daily-task world served on a real port, and a Chromium driven by Playwright.

Browser tests skip, naming what is missing, when Debian's Chromium (/usr/bin/chromium) or Playwright for
Python is not installed (`.ci/run` installs both)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.auditor.daily_world import World, open_world

CHROMIUM = os.environ.get("AUDITOR_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"


@pytest.fixture(scope="module")
def live_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One served world per test module (populating it loads the KGs and scores every answer)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield from open_world(tmp_path_factory.mktemp("console"), monkeypatch, serve=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright; it is in the dev extra)")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, live_world: World) -> Iterator[Any]:
    context = browser.new_context(base_url=live_world.base_url, viewport={"width": 1280, "height": 900},
                                  accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def login(page: Any, key: str) -> None:
    page.goto("/console/login")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def screenshot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
