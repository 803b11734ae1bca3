"""The dashboard in a real headless Chromium (Debian's chromium and chromium-driver, which
``make install`` installs), driven by Selenium with the system driver: the pages load,
the DAG page updates while a runner works, an action taken on the page changes the
instance, and a request without the token changes nothing.

The fixtures start and stop the dashboard process and the browser by PID. Screenshots of
the main pages are written to a temporary folder whose path is printed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from statemachine_wf import Client, Runner, RunnerOptions, Status, Store
from statemachine_wf.dag import DagBuilder, DagClient, Registry
from statemachine_wf.stores import open_store
from tests.unit.core.workflows import ThreeSteps

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "browser-operator-token"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
PAGE_CHANGING = (StaleElementReferenceException, NoSuchElementException)
"""What a wait may meet while the page reloads (after a form post): look again."""
SHOTS = Path(tempfile.mkdtemp(prefix="swf-dashboard-shots-"))

registry = Registry()
gate = threading.Event()


@registry.function("gated")
def gated(x: int) -> int:
    if not gate.wait(30):
        raise TimeoutError("the test never opened the gate")
    return x + 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    store = open_store(url)
    store.migrate()
    yield url, store
    store.close()


@pytest.fixture
def dashboard(db: tuple[str, Store], tmp_path: Path) -> Iterator[str]:
    """``statemachine-wf dashboard`` in its own process; its base URL."""
    url, _ = db
    port = _free_port()
    log = (tmp_path / "dashboard.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SWF_OPERATOR_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "statemachine_wf.cli",
            "--db",
            url,
            "-m",
            "tests.unit.core.workflows",
            "dashboard",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(base + "/workers", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((tmp_path / "dashboard.log").read_text()) from None
                time.sleep(0.1)
        yield base
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    # The system driver, named explicitly: Selenium Manager never runs, nothing is downloaded.
    service = Service(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()
        proc = service.process
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)


def _stale(exc: WebDriverException) -> WebDriverException:
    """A read of an element of the page the browser has just left is stale, however the
    driver words it: chromedriver sometimes answers "unknown error: unhandled inspector
    error: Node with given id does not belong to the document" (seen in CI, reading the
    header while the sign-in's redirect loaded), which the waits would not look past."""
    if "does not belong to the document" in str(exc):
        return StaleElementReferenceException(exc.msg)
    return exc


def _class_of(element: WebElement) -> str:
    """Its ``class`` attribute (``get_attribute`` is typed ``str | None``)."""
    try:
        value = element.get_attribute("class")
    except WebDriverException as exc:
        raise _stale(exc) from exc
    assert value is not None
    return value


def _text(element: WebElement) -> str:
    try:
        return element.text
    except WebDriverException as exc:
        raise _stale(exc) from exc


def _shot(browser: webdriver.Chrome, name: str) -> None:
    path = SHOTS / f"{name}.png"
    browser.save_screenshot(str(path))
    print(f"screenshot: {path}")


def _sign_in(browser: webdriver.Chrome, base: str) -> None:
    browser.get(base + "/login")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "login").click()
    WebDriverWait(browser, 10, ignored_exceptions=PAGE_CHANGING).until(
        lambda b: "operator" in _text(b.find_element(By.TAG_NAME, "header"))
    )


def test_pages_load_and_the_dag_page_updates_while_a_runner_works(
    db: tuple[str, Store], dashboard: str, browser: webdriver.Chrome
) -> None:
    _, store = db
    client = Client(store, [ThreeSteps])
    for i in range(5):
        client.start(ThreeSteps, {"n": i}, idempotency_key=f"order-{i}")
    store.dead_letter(instance_id=None, envelope={"x": 1}, reason="poison input", worker="w")
    b = DagBuilder("browser_pipeline")
    b.node("s", "start")
    b.node("a", "python", function="gated", args={"x": 1})
    b.node("e", "end", outputs={"a": "{{ctx.a}}"})
    b.chain("s", "a", "e")
    dag_id = DagClient(store).start(b.build())
    for path, name in [
        ("/", "overview"),
        ("/instances", "instances"),
        ("/dead-letters", "dead-letters"),
        ("/workers", "workers"),
        ("/signers", "signers"),
    ]:
        browser.get(dashboard + path)
        assert "statemachine_wf" in browser.title
        _shot(browser, name)
    browser.get(dashboard + "/instances")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#instances tbody a")) == 6
    browser.get(dashboard + f"/instances/{dag_id}")
    node = 'g[data-node="a"]'
    assert "completed" not in _class_of(browser.find_element(By.CSS_SELECTOR, node))
    gate.clear()
    runner = Runner(store, [], dags=registry, options=RunnerOptions(concurrency=2, idle_poll=0.2))
    runner.start()
    try:
        WebDriverWait(browser, 20, ignored_exceptions=PAGE_CHANGING).until(
            lambda d: "running" in _class_of(d.find_element(By.CSS_SELECTOR, node))
        )
        _shot(browser, "dag-running")
        gate.set()
        WebDriverWait(browser, 20, ignored_exceptions=PAGE_CHANGING).until(
            lambda d: "completed" in _class_of(d.find_element(By.CSS_SELECTOR, node))
        )
        WebDriverWait(browser, 20, ignored_exceptions=PAGE_CHANGING).until(
            lambda d: _text(d.find_element(By.ID, "status")) == "COMPLETED"
        )
        _shot(browser, "dag-completed")
    finally:
        gate.set()
        runner.stop(timeout=10)
    assert client.get(dag_id).status == Status.COMPLETED


def test_an_action_on_the_page_changes_the_instance_and_none_without_the_token(
    db: tuple[str, Store], dashboard: str, browser: webdriver.Chrome
) -> None:
    _, store = db
    client = Client(store, [ThreeSteps])
    iid = client.start(ThreeSteps, {"n": 1})
    # Not signed in: no action buttons; a POST sent from the page itself is refused.
    browser.get(dashboard + f"/instances/{iid}")
    assert browser.find_elements(By.ID, "action-cancel") == []
    status = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"fetch('/instances/{iid}/cancel', {{method: 'POST', "
        "body: new URLSearchParams({csrf: 'x'.repeat(32)})})"
        ".then(r => done(r.status));"
    )
    assert status == 403
    assert client.get(iid).status == Status.PENDING
    _sign_in(browser, dashboard)
    browser.get(dashboard + f"/instances/{iid}")
    _shot(browser, "instance")
    browser.find_element(By.ID, "action-cancel").click()
    dialog = browser.find_element(By.ID, "confirm")
    WebDriverWait(browser, 10, ignored_exceptions=PAGE_CHANGING).until(
        lambda d: dialog.is_displayed()
    )
    assert client.get(iid).status == Status.PENDING  # nothing until confirmed
    browser.find_element(By.ID, "confirm-ok").click()
    WebDriverWait(browser, 10, ignored_exceptions=PAGE_CHANGING).until(
        lambda d: _text(d.find_element(By.ID, "status")) == "CANCELLED"
    )
    assert client.get(iid).status == Status.CANCELLED
