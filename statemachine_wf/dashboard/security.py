"""Who may change things: the operator token, its session cookie and the CSRF check.

The dashboard is read-only unless it was started with an operator token. An operator
signs in once (``POST /login`` with the token); the browser then holds

* ``swf_operator``: the time it was issued and an HMAC, keyed by the token, of that time
  (never the token itself), ``HttpOnly`` and ``SameSite=Strict``: a page of another site
  can neither read it nor make the browser send it with a cross-site request. It is
  refused once older than the session's maximum age (default 12 hours; the browser is
  told to drop it then too), so a cookie copied off a machine does not stay good until
  the token changes;
* ``swf_csrf``: a random value set on the first page view, ``SameSite=Strict`` too.

Every state-changing request (signing out too) is a POST that must carry the CSRF value
twice: in the cookie and in the form field ``csrf`` (the double-submit pattern: another
origin cannot read the cookie to copy it into its form). Both checks stand on their own,
so an old browser that ignores SameSite is still refused by the double submit. A script instead
sends the token itself in the ``X-Operator-Token`` header (no cookie, so no CSRF risk).
Comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import time

from starlette.requests import Request

OPERATOR_COOKIE = "swf_operator"
CSRF_COOKIE = "swf_csrf"
TOKEN_HEADER = "x-operator-token"
DEFAULT_SESSION_MAX_AGE = 12 * 3600.0
"""Seconds an operator's sign-in lasts (``Config.dashboard_session_max_age``)."""
# "<issued, epoch seconds>.<64 hex digits>": anything else is refused before any HMAC.
_SESSION = re.compile(r"([0-9]{1,12})\.([0-9a-f]{64})")
# A cookie issued this far in the future still counts (clocks of several dashboard
# processes given the same token differ a little); further, it is refused.
_SKEW = 60


class Guard:
    """The operator token (None: read-only) and the checks made with it."""

    def __init__(
        self, operator_token: str | None, session_max_age: float = DEFAULT_SESSION_MAX_AGE
    ) -> None:
        # An empty token means none: "" must never be a secret that an empty form matches.
        self.token = operator_token or None
        if not (math.isfinite(session_max_age) and session_max_age > 0):
            raise ValueError(f"session_max_age must be > 0 seconds, got {session_max_age}")
        self.session_max_age = session_max_age

    @property
    def writable(self) -> bool:
        return self.token is not None

    def session_value(self, now: float | None = None) -> str:
        """The operator cookie's value: its issue time and an HMAC of it keyed by the
        token, useless without the token and refused after ``session_max_age``."""
        issued = str(int(time.time() if now is None else now))
        return f"{issued}.{self._signature(issued)}"

    def _signature(self, issued: str) -> str:
        if self.token is None:
            raise PermissionError("the dashboard is read-only")
        # Derived, not random: no server-side session store, every dashboard process given
        # the same token accepts the same cookie, and changing the token signs all out.
        # The issue time is signed, so it cannot be moved forward to extend a session.
        message = b"swf-dashboard-operator:" + issued.encode()
        return hmac.new(self.token.encode(), message, hashlib.sha256).hexdigest()

    def session_ok(self, cookie: str | None, now: float | None = None) -> bool:
        """The cookie was issued with this token and is not older than the maximum age."""
        if self.token is None or cookie is None:
            return False
        found = _SESSION.fullmatch(cookie)
        if found is None:
            return False
        issued, signature = found.groups()
        # compare_digest before the age: the time taken does not depend on how much of a
        # forged signature is right.
        if not hmac.compare_digest(signature.encode(), self._signature(issued).encode()):
            return False
        age = (time.time() if now is None else now) - int(issued)
        return -_SKEW <= age <= self.session_max_age

    def token_matches(self, given: str | None) -> bool:
        # compare_digest: the time taken does not tell a guesser how many leading
        # characters were right.
        return (
            self.token is not None
            and given is not None
            and hmac.compare_digest(given.encode(), self.token.encode())
        )

    def is_operator(self, request: Request) -> bool:
        """Signed in (the session cookie) or a script sending the token header."""
        if self.token is None:
            return False
        if self.token_matches(request.headers.get(TOKEN_HEADER)):
            return True
        return self.session_ok(request.cookies.get(OPERATOR_COOKIE))

    # The CSRF value needs no server-side state either: double submit only asks that the
    # form echo the cookie, which a page of another origin cannot read.
    @staticmethod
    def csrf_value(request: Request) -> str:
        """The browser's CSRF value, or a fresh one (set as a cookie by the response)."""
        return request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)

    @staticmethod
    def csrf_ok(request: Request, form_value: object) -> bool:
        cookie = request.cookies.get(CSRF_COOKIE)
        return (
            isinstance(form_value, str)
            and cookie is not None
            # Not made here if short (token_urlsafe(24) gives 32 characters): an empty
            # cookie and an empty form field must not count as a match.
            and len(cookie) >= 16
            and hmac.compare_digest(cookie.encode(), form_value.encode())
        )

    def may_change(self, request: Request, form_value: object) -> str | None:
        """None when this POST may change something, else why not."""
        if self.token is None:
            return "the dashboard is read-only (start it with an operator token)"
        if self.token_matches(request.headers.get(TOKEN_HEADER)):
            return None  # a script: no cookie is involved
        if not self.is_operator(request):
            return "sign in with the operator token first"
        if not self.csrf_ok(request, form_value):
            return "the CSRF check failed (reload the page and try again)"
        return None
