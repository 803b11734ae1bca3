"""The operator's session cookie expires, and signing out needs the CSRF value.

Before: the cookie was an HMAC of the token alone, good until the token changed (a copy
taken off a machine stayed valid for months), and ``POST /logout`` had no CSRF check
(another site's form could sign the operator out).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from statemachine_wf import Client, Config, Status
from statemachine_wf.dashboard.app import create_app
from statemachine_wf.dashboard.security import OPERATOR_COOKIE, Guard
from statemachine_wf.stores.sqlite import SQLiteStore
from tests.unit.core.workflows import ThreeSteps

TOKEN = "s3cret-operator-token"
HOUR = 3600.0


@pytest.fixture
def web(sqlite_store: SQLiteStore) -> Iterator[TestClient]:
    app = create_app(sqlite_store, operator_token=TOKEN, workflows=[ThreeSteps])
    with TestClient(app) as c:
        yield c


def _csrf(web: TestClient) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', web.get("/login").text)
    assert found is not None
    return found.group(1)


def _sign_in(web: TestClient) -> tuple[str, str]:
    """Sign in; the CSRF value and the Set-Cookie header of the operator cookie."""
    csrf = _csrf(web)
    r = web.post("/login", data={"csrf": csrf, "token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303
    [header] = [h for h in r.headers.get_list("set-cookie") if h.startswith(OPERATOR_COOKIE)]
    return csrf, header


def _signed_in(web: TestClient) -> bool:
    return 'action="/logout"' in web.get("/").text


def test_the_session_cookie_is_refused_after_its_maximum_age(
    web: TestClient, sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client(sqlite_store, [ThreeSteps])
    iid = client.start(ThreeSteps, {"n": 1})
    csrf, header = _sign_in(web)
    # The browser is told to drop it after 12 hours too.
    assert re.search(r"(?i)max-age=43200\b", header)
    assert _signed_in(web)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 12 * HOUR + 120)
    assert not _signed_in(web)
    r = web.post(f"/instances/{iid}/cancel", data={"csrf": csrf})
    assert r.status_code == 403
    assert "sign in" in r.text
    monkeypatch.undo()
    assert client.get(iid).status == Status.PENDING
    # Signing in again gives a fresh session.
    _sign_in(web)
    ok = web.post(f"/instances/{iid}/cancel", data={"csrf": csrf}, follow_redirects=False)
    assert ok.status_code == 303


def test_the_maximum_age_is_configurable(sqlite_store: SQLiteStore) -> None:
    app = create_app(sqlite_store, operator_token=TOKEN, session_max_age=90)
    with TestClient(app) as web:
        _, header = _sign_in(web)
        assert re.search(r"(?i)max-age=90\b", header)
    config = Config.from_env({"SWF_DASHBOARD_SESSION_MAX_AGE": "600"})
    assert config.dashboard_session_max_age == 600.0
    assert Config().dashboard_session_max_age == 12 * HOUR
    for bad in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(ValueError, match="SWF_"):
            Config.from_env({"SWF_DASHBOARD_SESSION_MAX_AGE": bad})
    with pytest.raises(ValueError, match="session_max_age must be > 0"):
        create_app(sqlite_store, operator_token=TOKEN, session_max_age=0)


def test_a_cookie_is_checked_by_its_signed_issue_time() -> None:
    guard = Guard(TOKEN, session_max_age=HOUR)
    now = 1_700_000_000.0
    cookie = guard.session_value(now=now)
    issued, signature = cookie.split(".")
    assert issued == "1700000000"
    assert TOKEN not in cookie
    assert guard.session_ok(cookie, now=now + HOUR)
    assert not guard.session_ok(cookie, now=now + HOUR + 1)
    # The issue time is signed: moving it forward to extend the session breaks the HMAC.
    assert not guard.session_ok(f"{int(now + HOUR)}.{signature}", now=now + HOUR + 1)
    # Issued well in the future (a forged clock): refused; a little skew is tolerated.
    assert not guard.session_ok(guard.session_value(now=now + 600), now=now)
    assert guard.session_ok(guard.session_value(now=now + 30), now=now)
    # Another token's cookie, the old bare-HMAC form and garbage: refused.
    assert not Guard("other-token").session_ok(cookie, now=now)
    for bad in ("", signature, f"x.{signature}", f"{issued}.{signature.upper()}", "1.2.3"):
        assert not guard.session_ok(bad, now=now)
    assert not Guard(None).session_ok(cookie, now=now)


def test_logout_needs_the_csrf_value(web: TestClient) -> None:
    csrf, _ = _sign_in(web)
    # Another site's form (no CSRF value, or a wrong one) does not sign the operator out.
    assert web.post("/logout", data={}).status_code == 403
    assert web.post("/logout", data={"csrf": "x" * 32}).status_code == 403
    assert _signed_in(web)
    # The page's own sign-out form carries the value.
    assert f'action="/logout" class="inline"><input type="hidden" name="csrf" value="{csrf}"' in (
        web.get("/").text
    )
    r = web.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303
    assert not _signed_in(web)
