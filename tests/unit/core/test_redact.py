"""URL redaction: credentials in a URL never reach an error or a log line (issue 9 item 8)."""

from __future__ import annotations

import logging
import string

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from statemachine_wf.definition.redact import install_log_redaction, redact_text, redact_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://eth-mainnet.example/v2/SECRETKEY", "https://eth-mainnet.example/***"),
        ("https://node.example:8545/?apikey=SECRETKEY", "https://node.example:8545/***"),
        ("postgresql://user:SECRETPW@db.example:5432/app", "postgresql://***@db.example:5432/***"),
        ("postgresql://SECRETUSER@db.example/app", "postgresql://***@db.example/***"),
        ("http://node.example#SECRETFRAG", "http://node.example/***"),
        ("http://[::1]:8545/v2/SECRETKEY", "http://[::1]:8545/***"),
        ("http://[fe80::1%eth0]:8545/SECRETKEY", "http://[fe80::1%eth0]:8545/***"),
        ("http://[::1:8545/SECRETKEY", "http://***"),  # unbalanced bracket: no host either
        ("http://user:SEC/RET@host/db", "http://***"),  # unencoded '/' in the password
        ("http://host/v2/a@SECRET", "http://***"),
        ("user:SECRETPW@db.example:5432/app", "***@db.example:5432/***"),
        ("node.example:8545/SECRETKEY?x=1", "node.example:8545/***"),
        ("localhost:8545", "localhost:8545"),
        ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
        ("http://127.0.0.1:8545/", "http://127.0.0.1:8545"),
        ("sqlite:///tmp/x.db", "sqlite:///***"),
        ("not a url SECRET", "***"),
        ("", ""),
    ],
)
def test_redact_url_keeps_only_scheme_host_port(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert "SECRET" not in redact_url(url)


def test_redact_text_cleans_urls_and_echoed_pieces() -> None:
    url = "http://u:PASSWORD1@127.0.0.1:1/v2/SECRETKEY?apikey=SECRETQ#FRAGMENT1"
    urllib3 = (
        "HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: "
        "/v2/SECRETKEY?apikey=SECRETQ (Caused by NewConnectionError(...))"
    )
    for text in (
        f"request to {url} failed",
        f"request to '{url}'",
        urllib3,
        '127.0.0.1:1 "POST /v2/SECRETKEY?apikey=SECRETQ HTTP/1.1" 200 31',
        "a driver said: SECRETKEY and SECRETQ and PASSWORD1 and FRAGMENT1",
    ):
        cleaned = redact_text(text, url)
        for secret in ("PASSWORD1", "SECRETKEY", "SECRETQ", "FRAGMENT1"):
            assert secret not in cleaned, (text, cleaned)
    assert "127.0.0.1" in redact_text(urllib3, url)
    # "'" is legal in userinfo and path; trailing punctuation may belong to the path
    assert (
        redact_text("see https://SEC'RET1@node.example rest") == "see https://***@node.example rest"
    )
    assert "SECRET2" not in redact_text("(url='http://h/x/SECRET2......')")
    assert redact_text("at http://node.example:8545).") == "at http://node.example:8545)."
    assert redact_text("plain words, no URL") == "plain words, no URL"


def test_log_filter_redacts_records_of_url_loggers(caplog: pytest.LogCaptureFixture) -> None:
    install_log_redaction("test.redact.urls")
    install_log_redaction("test.redact.urls")  # idempotent
    assert len(logging.getLogger("test.redact.urls").filters) == 1
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test.redact.urls").debug(
            "Making request HTTP. URI: %s, Method: %s", "https://h.example/v2/SECRETKEY", "x"
        )
    assert "SECRETKEY" not in caplog.text
    assert "https://h.example/***" in caplog.text


_SECRET = st.text(alphabet=string.ascii_letters + string.digits + "-_~.!$&'()*+,;=%", min_size=6)
_HOSTS = st.sampled_from(["node.example", "127.0.0.1", "[::1]", "h", "a-b.c.d"])


@st.composite
def _url_with_secret(draw: st.DrawFn) -> tuple[str, str]:
    secret = draw(_SECRET.filter(lambda s: "***" not in s))
    host = draw(_HOSTS)
    port = draw(st.sampled_from(["", ":1", ":8545", ":65535"]))
    scheme = draw(st.sampled_from(["https://", "http://", "postgresql://", "wss://", ""]))
    where = draw(st.sampled_from(["user", "password", "path", "query", "fragment", "segment"]))
    prefix = draw(st.text(alphabet=string.ascii_lowercase, max_size=4))
    parts = {
        "user": f"{secret}@{host}{port}",
        "password": f"u:{secret}@{host}{port}/db",
        "path": f"{host}{port}/{prefix}{secret}",
        "segment": f"{host}{port}/v2/{secret}/x",
        "query": f"{host}{port}/?{prefix}={secret}&b=1",
        "fragment": f"{host}{port}#{secret}",
    }
    assume(secret not in f"{scheme}{host}{port}***")  # the kept part is not a secret
    return scheme + parts[where], secret


@settings(max_examples=400, deadline=None)
@given(_url_with_secret(), st.sampled_from(["", "failed: ", "url='", "<"]))
def test_random_secrets_never_survive(case: tuple[str, str], lead: str) -> None:
    url, secret = case
    assert secret not in redact_url(url)
    assert secret not in redact_text(f"{lead}{url} rest", url)
    if "://" in url:  # in free text, only a URL with a scheme is recognisable as one
        assert secret not in redact_text(f"{lead}{url} rest")
