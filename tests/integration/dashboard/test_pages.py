"""The dashboard over Starlette's TestClient, on SQLite and PostgreSQL: every page, the
keyset paging and filters, the actions, and the refusals (no token, no CSRF) that change
nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from statemachine_wf import Client, Runner, RunnerOptions, Status, Store
from statemachine_wf.dag import DagBuilder, DagClient, Registry
from statemachine_wf.dashboard.app import create_app
from tests.unit.core.workflows import ThreeSteps

TOKEN = "s3cret-operator-token"
registry = Registry()


@registry.function("twice")
def twice(x: int) -> int:
    return x * 2


def _dag() -> DagBuilder:
    b = DagBuilder("dash_pipeline")
    b.node("s", "start")
    b.node("a", "python", function="twice", args={"x": 2})
    b.node("e", "end", outputs={"a": "{{ctx.a}}"})
    b.chain("s", "a", "e")
    return b


@pytest.fixture
def web(store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(store, operator_token=TOKEN, workflows=[ThreeSteps])) as c:
        yield c


def _csrf(web: TestClient) -> str:
    page = web.get("/login")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def _sign_in(web: TestClient) -> str:
    csrf = _csrf(web)
    r = web.post("/login", data={"csrf": csrf, "token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303
    return csrf


def test_every_page_loads(store: Store, web: TestClient) -> None:
    client = Client(store, [ThreeSteps])
    first = client.start(ThreeSteps, {"n": 1}, idempotency_key="order-1")
    dag_id = DagClient(store).start(_dag().build())
    store.dead_letter(instance_id=first, envelope={"x": 1}, reason="poison", worker="w")
    for path in ["/", "/instances", "/dead-letters", "/workers", "/login", f"/instances/{first}"]:
        r = web.get(path)
        assert r.status_code == 200, path
    page = web.get(f"/instances/{first}").text
    assert 'class="node current" data-node="first"' in page  # the current step highlighted
    assert "WORKFLOW_CREATED" in page
    dag_page = web.get(f"/instances/{dag_id}").text
    assert 'data-node="a"' in dag_page
    assert f"/instances/{dag_id}/stream" in dag_page
    assert "poison" in web.get("/dead-letters").text
    assert web.get(f"/instances/{first.replace('a', 'b', 1)}x").status_code == 404
    metrics = web.get("/metrics").text
    assert (
        'swf_instances{status="RUNNING"}' in metrics or 'swf_instances{status="PENDING"}' in metrics
    )
    assert 'swf_dead_letters{state="waiting"} 1.0' in metrics
    assert re.search(
        r'swf_queue_depth\{kind="machine",state="ready",type="test.three.v1"\} 1.0', metrics
    )


def test_filters_and_keyset_paging(store: Store, web: TestClient) -> None:
    client = Client(store, [ThreeSteps])
    ids = [client.start(ThreeSteps, {"n": i}, idempotency_key=f"k-{i}") for i in range(55)]
    first_page = web.get("/instances").text
    more = re.search(r'href="(/instances\?after=[^"]+)" id="next"', first_page)
    assert more is not None
    second = web.get(more.group(1).replace("&amp;", "&")).text
    shown = set(re.findall(r'<a href="/instances/([0-9a-f-]{36})">', first_page + second))
    assert shown == set(ids)
    assert 'id="next"' not in second
    found = web.get("/instances", params={"q": "k-7"}).text
    assert re.findall(r'<a href="/instances/([0-9a-f-]{36})">', found) == [ids[7]]
    assert "no instances" in web.get("/instances", params={"status": "FAILED"}).text
    assert "no instances" in web.get("/instances", params={"type": "other."}).text
    assert "no instances" in web.get("/instances", params={"since": "2999-01-01T00:00"}).text


def test_actions_need_the_token_and_the_csrf_value(store: Store, web: TestClient) -> None:
    client = Client(store, [ThreeSteps])
    iid = client.start(ThreeSteps, {"n": 1})
    csrf = _csrf(web)
    # Not signed in: refused, nothing changes.
    assert web.post(f"/instances/{iid}/cancel", data={"csrf": csrf}).status_code == 403
    # A wrong token does not sign in.
    assert web.post("/login", data={"csrf": csrf, "token": "wrong"}).status_code == 403
    _sign_in(web)
    # Signed in, but the form lacks the CSRF value (a cross-site form): refused.
    assert web.post(f"/instances/{iid}/cancel", data={}).status_code == 403
    assert web.post(f"/instances/{iid}/cancel", data={"csrf": "x" * 32}).status_code == 403
    assert client.get(iid).status == Status.PENDING
    assert not client.get(iid).cancel_requested
    r = web.post(f"/instances/{iid}/cancel", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303
    assert client.get(iid).status == Status.CANCELLED
    # A script sends the token in a header instead (no cookie, no CSRF value).
    other = client.start(ThreeSteps, {"n": 2})
    anon = TestClient(web.app)
    assert (
        anon.post(f"/instances/{other}/cancel", headers={"X-Operator-Token": "no"}).status_code
        == 403
    )
    assert client.get(other).status == Status.PENDING
    ok = anon.post(
        f"/instances/{other}/cancel", headers={"X-Operator-Token": TOKEN}, follow_redirects=False
    )
    assert ok.status_code == 303
    assert client.get(other).status == Status.CANCELLED


def test_read_only_without_a_token_and_signal_redrive(store: Store) -> None:
    client = Client(store, [ThreeSteps])
    iid = client.start(ThreeSteps, {"n": 1})
    with TestClient(create_app(store)) as ro:
        page = ro.get(f"/instances/{iid}").text
        assert "action-cancel" not in page
        assert "read-only" in page
        r = ro.post(f"/instances/{iid}/cancel", headers={"X-Operator-Token": TOKEN})
        assert r.status_code == 403
    assert client.get(iid).status == Status.PENDING
    with TestClient(create_app(store, operator_token=TOKEN, workflows=[ThreeSteps])) as web:
        csrf = _sign_in(web)
        r = web.post(
            f"/instances/{iid}/signal",
            data={"csrf": csrf, "name": "go", "payload": '{"a": 1}'},
            follow_redirects=False,
        )
        # ThreeSteps declares no signal: refused with the client's reason, nothing written.
        assert r.status_code == 409
        assert "go" in r.text
        assert client.signal_counts(iid).get("pending", 0) == 0
        bad = web.post(
            f"/instances/{iid}/signal", data={"csrf": csrf, "name": "go", "payload": "{"}
        )
        assert bad.status_code == 409
        store.dead_letter(
            instance_id=None,
            envelope={"type": ThreeSteps.spec().workflow_type, "input": {"n": 5}},
            reason="r",
            worker="w",
        )
        letter = client.dead_letters()[0]["id"]
        assert web.post(f"/dead-letters/{letter}/redrive", data={}).status_code == 403
        assert client.dead_letter(letter).get("redriven_at") is None
        r = web.post(f"/dead-letters/{letter}/redrive", data={"csrf": csrf}, follow_redirects=False)
        assert r.status_code in (303, 409)  # redriven, or refused with the reason shown


def test_the_dag_stream_sends_node_updates_until_the_end(store: Store, web: TestClient) -> None:
    dag_id = DagClient(store).start(_dag().build())
    runner = Runner(store, [], dags=registry, options=RunnerOptions(concurrency=2, idle_poll=0.2))
    runner.run_until_idle(timeout=60)
    with web.stream("GET", f"/instances/{dag_id}/stream") as r:
        body = "".join(r.iter_text())
    assert '"node": "a", "node_status": "completed"' in body
    assert "event: end" in body
    assert 'class="node completed" data-node="a"' in web.get(f"/instances/{dag_id}").text


def test_metrics_show_the_signer_slots(store: Store, web: TestClient) -> None:
    client = Client(store, [ThreeSteps])
    holder, waiter = (client.start(ThreeSteps, {"n": 1}, delay=3600) for _ in range(2))
    key = "eth:31337:0x00000000000000000000000000000000000000bb"
    store.acquire_lock(key, holder)
    store.acquire_lock(key, waiter)
    metrics = web.get("/metrics").text
    assert f'swf_signer_slot_waiting{{key="{key}"}} 1.0' in metrics
    assert f'swf_signer_slot_held_seconds{{key="{key}"}}' in metrics
    assert f'swf_signer_slot_wait_seconds{{key="{key}"}}' in metrics
    store.release_locks(holder)
    store.release_locks(waiter)
    assert "swf_signer_slot_waiting{" not in web.get("/metrics").text  # nothing held
