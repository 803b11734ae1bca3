"""The dashboard's signer slots page (``/signers``) on both stores: each busy signer's
holder, waiting instances, pending hash and its age, as ``Client.signers`` reads them."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from statemachine_wf import Store
from statemachine_wf.dashboard.app import create_app
from tests.integration.core.test_signers_view import A, B, started


def test_the_signer_slots_page(store: Store) -> None:
    with TestClient(create_app(store)) as web:
        idle = web.get("/signers")
        assert idle.status_code == 200
        assert "every signer is idle" in idle.text
        assert 'href="/signers"' in web.get("/").text  # in the navigation

        _, ids = started(store)
        page = web.get("/signers").text
    rows = re.findall(r'<tr data-signer="([^"]+)">(.*?)</tr>', page, re.S)
    assert [signer for signer, _ in rows] == [A.split(":")[2], B.split(":")[2]]
    busy, other = rows[0][1], rows[1][1]
    assert f'<a href="/instances/{ids["holder"]}">{ids["holder"]}</a> t.signers.v1' in busy
    assert "RUNNING" in busy
    assert "at send" in busy
    assert f'<code class="hash">0x{2:064x}</code> (2 signed)' in busy
    assert "<td>6</td>" in busy  # the last nonce
    age = re.search(r'<td class="age">([\d.]+) s</td>', busy)
    assert age is not None
    assert float(age.group(1)) > 0
    waiting = re.search(r'<td class="waiting">(\d+)(.*?)</td>', busy, re.S)
    assert waiting is not None
    assert waiting.group(1) == "2"
    assert re.findall(r'href="/instances/([^"]+)"', waiting.group(2)) == [
        ids["first"],
        ids["second"],
    ]
    assert ids["gone"] not in page  # an ended waiter is not listed
    assert "nothing signed yet" in other
    assert '<td class="age">-</td>' in other
