"""Keep credentials in URLs out of errors and logs.

A hosted RPC URL carries its API key in the path or the query
(``https://eth-mainnet.example/v2/KEY``, ``...?apikey=KEY``) and a store URL its password
(``postgresql://user:secret@host/db``). Any error or log line built from such a URL shows
only ``scheme://host:port``, which is enough to see *which* endpoint failed:

* :func:`redact_url` turns one URL into that form;
* :func:`redact_text` cleans free text (a driver's error message): every URL in it is
  redacted, and so are the secret parts of the URLs it is given (a driver that echoes
  just the path or one query value), plus the path of an HTTP request line;
* :func:`install_log_redaction` adds a filter that applies :func:`redact_text` to the
  records of third-party loggers that print the URL they were given (web3, urllib3,
  httpx, psycopg's pool).

Pure functions, no imports beyond the standard library.
"""

from __future__ import annotations

import logging
import re

__all__ = ["REDACTED", "install_log_redaction", "redact_text", "redact_url"]

REDACTED = "***"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
# A host we are willing to show: a name or IPv4 address, or a bracketed IPv6 address,
# with an optional numeric port. Anything else is not shown at all.
_HOST = re.compile(r"^(?:[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.\-]+)?\])(?::\d{1,5})?$")
# A quote ends a URL only when it is not part of it: "'" is legal in userinfo and path.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"<>`]+")
_TRAILING = ".,;:)]}'\""
_REQUEST_LINE = re.compile(r"\b(GET|POST|PUT|DELETE|HEAD|PATCH|OPTIONS) /[^\s'\"]*")
_URL_LABEL = re.compile(r"(\burl[:=] ?['\"]?)/[^\s'\"()]*", re.IGNORECASE)
_MIN_TOKEN = 4  # shorter path segments / query values are not scrubbed from free text


def _split(url: str) -> tuple[str, str, str, str]:
    """``(scheme, userinfo, hostport, rest)``; scheme is ``""`` for a bare authority."""
    found = _SCHEME.match(url)
    scheme = found.group(1) if found else ""
    body = url[found.end() :] if found else url
    cut = min((i for i in (body.find(c) for c in "/?#") if i >= 0), default=len(body))
    authority, rest = body[:cut], body[cut:]
    # The last '@' ends the userinfo: a password may hold an unencoded '@' of its own.
    userinfo, at, hostport = authority.rpartition("@")
    if not at:
        userinfo = ""
    return scheme, userinfo, hostport, rest


def redact_url(url: str) -> str:
    """``url`` reduced to ``scheme://host:port``.

    Userinfo, path, query and fragment are replaced by ``***``
    (``https://***@node.example:8545/***``), so that the reader sees that something was
    there but not what. A URL that cannot be parsed safely (an ``@`` after the authority,
    an unbalanced IPv6 bracket) shows no host either: ``postgresql://***``. Text without a
    ``scheme://`` is read as ``host:port/path``.

    Args:
        url: Any string; it need not be a valid URL.

    Returns:
        The redacted form; it never contains the userinfo, path, query or fragment.
    """
    scheme, userinfo, hostport, rest = _split(url)
    prefix = f"{scheme}://" if scheme else ""
    host_ok = _HOST.match(hostport) is not None or (hostport == "" and not userinfo)
    if "@" in rest.split("?", 1)[0].split("#", 1)[0] or not host_ok:
        # An unencoded '@' or '/' in a password moves the authority's end: show nothing.
        return f"{prefix}{REDACTED}" if (hostport or userinfo or rest) else prefix
    out = prefix + (f"{REDACTED}@" if userinfo else "") + hostport
    if rest.strip("/"):
        out += f"/{REDACTED}"
    return out


def _secrets(url: str) -> list[str]:
    """The parts of ``url`` that must not appear in text, longest first."""
    _, userinfo, _, rest = _split(url)
    found: set[str] = set()
    # Each piece on its own as well as whole: a driver may echo just the password, the
    # path without its slashes or one query value rather than the whole URL.
    if userinfo:
        found.add(userinfo)
        _, colon, password = userinfo.partition(":")
        if colon and password:
            found.add(password)
    path, _, tail = rest.partition("?")
    path, _, fragment = path.partition("#")
    query, _, qfragment = tail.partition("#")
    fragment = fragment or qfragment
    if path.strip("/"):
        found.add(path)
        found.add(path.strip("/"))
        # Short segments ("v2", "db") are left: replacing them everywhere would garble the
        # message, and a path segment that short is no API key worth the loss.
        found.update(seg for seg in path.split("/") if len(seg) >= _MIN_TOKEN)
    if query:
        found.add(query)
        for pair in query.split("&"):
            _, _, value = pair.partition("=")
            if len(value) >= _MIN_TOKEN:
                found.add(value)
            if len(pair) >= _MIN_TOKEN:
                found.add(pair)
    if fragment:
        found.add(fragment)
    # Longest first: replacing a short piece first (a segment inside the whole path) would
    # break the longer one apart, and the rest of it would no longer match and stay shown.
    return sorted((s for s in found if s), key=len, reverse=True)


def _redact_match(match: re.Match[str]) -> str:
    text = match.group(0)
    stripped = text.rstrip(_TRAILING)  # closing punctuation of the sentence around it
    redacted = redact_url(stripped)
    if redacted.endswith(REDACTED):
        return redacted  # the punctuation may belong to the dropped path: drop it too
    return redacted + text[len(stripped) :]


def redact_text(text: str, *urls: str | None) -> str:
    """``text`` with every URL in it redacted, and the secrets of ``urls`` removed.

    Args:
        text: A message, e.g. a driver's error text.
        urls: The URLs the message may echo in pieces (the endpoint that was called).

    Returns:
        The cleaned text: URLs as :func:`redact_url`, the userinfo, password, path,
        path segments and query values of ``urls`` replaced by ``***``, and the path of
        an HTTP request line (``POST /v2/KEY``) or of ``url: /path`` replaced too.
    """
    # Whole URLs first, so they keep their host; then what a driver prints without a
    # scheme (a request line, urllib3's "url: /path"); then the pieces of the known URLs.
    out = _URL_IN_TEXT.sub(_redact_match, text)
    out = _REQUEST_LINE.sub(lambda m: f"{m.group(1)} /{REDACTED}", out)
    out = _URL_LABEL.sub(lambda m: f"{m.group(1)}/{REDACTED}", out)
    for url in urls:
        if url:
            for secret in _secrets(url):
                out = out.replace(secret, REDACTED)
    return out


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record with :func:`redact_text` applied."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: let the handler report it as usual
            return True
        cleaned = redact_text(message)
        # The message is replaced already formatted and the args dropped: kept, they would
        # be formatted into the text again by the handler, secrets included. A record with
        # nothing to redact is left as logged.
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


# One shared instance: install_log_redaction tests membership by identity, so calling it
# again (every EthereumClient and ArweaveClient does) never stacks a second filter on a logger.
_FILTER = RedactingFilter()

# Third-party loggers that print the URL they were given (at DEBUG or INFO).
URL_LOGGERS = (
    "web3.providers.HTTPProvider",
    "web3.providers.AsyncHTTPProvider",
    "web3._utils.http_session_manager.HTTPSessionManager",
    "urllib3.connectionpool",
    "httpx",
    "psycopg.pool",
)


def install_log_redaction(*names: str) -> None:
    """Attach the redacting filter to the named loggers (default :data:`URL_LOGGERS`).

    Idempotent. A logger filter sees the records logged on that logger itself, before
    they propagate to any handler, so every handler (files, pytest's caplog) gets the
    redacted text.
    """
    for name in names or URL_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
