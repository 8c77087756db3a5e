"""Fixtures of the browser tests: Debian's chromium driven by Playwright, and a running demo.

The browser is never downloaded: ``/usr/bin/chromium`` (installed by ``.ci/run`` with apt) or
the tests are skipped, saying so. Pages reach 127.0.0.1 only; every other request (map tiles)
is refused, as it would be offline, so the tests also show that the map works without tiles.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.demo_process import DemoProcess, Printed, launch_demo

CHROMIUM = Path(os.environ.get("RIDECAST_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-background-networking", "--disable-gpu",
    "--disable-component-update", "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless chromium from Debian's package (skipped when it is not installed).

    Module-scoped on purpose: Playwright's sync API keeps an event loop running in this
    thread while it lives, and other tests' ``asyncio.run`` must not meet it.
    """
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DemoProcess, Printed]]:
    """One ``ridecast demo`` for the module, with its printed instructions."""
    process = launch_demo(tmp_path_factory.mktemp("demo") / "data")
    try:
        yield process, process.wait_ready()
    finally:
        process.stop()


def local_only(page: Any, origin: str) -> None:
    """Refuse every request that leaves ``origin`` (tiles, mostly): the tests run offline.

    Only foreign URLs are routed (to be aborted): a routed request waits for this Python
    process to answer, so routing the page's own requests would stall them whenever the
    test is not calling into Playwright.
    """
    foreign = re.compile(rf"^(?!{re.escape(origin)}/|data:|blob:)")
    page.route(foreign, lambda route: route.abort())


@pytest.fixture
def page(browser: Any, demo: tuple[DemoProcess, Printed]) -> Iterator[Any]:
    """A fresh page (own storage) at the demo's origin, with its errors collected."""
    context = browser.new_context(viewport={"width": 1400, "height": 860})
    new_page = context.new_page()
    new_page.errors = []
    new_page.on("pageerror", lambda exc: new_page.errors.append(str(exc)))
    local_only(new_page, demo[0].base_url)
    yield new_page
    context.close()
