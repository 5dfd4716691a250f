"""A headless Chromium for the web view's tests, driven by Selenium, and what each test asks of it.

Debian's ``chromium`` and ``chromium-driver`` packages (``apt-get install -y chromium
chromium-driver``). Without them the browser tests skip and say why - except in CI
(``CI=true``), where a skipped browser test would hide a broken page, so they fail.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
INSTALL = "apt-get install -y chromium chromium-driver"


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} and CI=true: the browser tests must run in CI ({INSTALL})")
    pytest.skip(f"{reason}: the browser tests need it ({INSTALL})")


def chrome() -> Iterator[Any]:
    """A headless Chromium session; skips (fails under CI=true) when it cannot be found or started."""
    try:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        _missing("chromium or chromedriver not found on PATH")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1400,1000", "--hide-scrollbars"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
    except WebDriverException as exc:
        _missing(f"chromium did not start ({str(exc).splitlines()[0]})")
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    """Messages the page logged at error level (uncaught exceptions, failed loads, CSP refusals)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def wait_until_drawn(driver: Any, timeout: float = 30) -> None:
    """Until the page's script ran and every figure on it was drawn by Plotly."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(lambda d: d.execute_script(
        "return document.body && document.body.dataset.ready === 'true' && "
        "Array.from(document.querySelectorAll('[data-figure]')).every(f => f.dataset.drawn === 'true')"))


def screenshot(driver: Any, name: str) -> Path:
    """The whole page, not only the first screenful, as test-artifacts/ui/NAME.png (Chromium's DevTools
    capture beyond the viewport, at the page's full height)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    wait_until_drawn(driver)
    width, height = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": int(width), "height": int(height), "scale": 1}})
    path = ARTIFACTS / f"{name}.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    return path
