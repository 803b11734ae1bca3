"""The dashboard as a Starlette (ASGI) app over one store: :func:`create_app`.

Pages: ``/`` (counts, queue depth, throughput), ``/instances`` (filters, keyset paging),
``/instances/{id}`` (state or DAG graph, history, progress, errors, actions),
``/instances/{id}/stream`` (server-sent events from :func:`statemachine_wf.client.live.watch`),
``/dead-letters`` (with redrive), ``/workers``, ``/signers`` (signer slots: holder, waiting,
pending hash and age), ``/metrics`` (Prometheus). Store calls
are blocking and run in the thread pool. See :mod:`.security` for who may POST.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from statemachine_wf import Client, InstanceRecord, Status, Store, Workflow, WorkflowError
from statemachine_wf.client.live import watch
from statemachine_wf.definition.wait_tokens import shown_event
from statemachine_wf.errors import NotFound, StoreUnavailable

from . import graphs, metrics
from .reads import overview
from .security import CSRF_COOKIE, DEFAULT_SESSION_MAX_AGE, OPERATOR_COOKIE, Guard

log = logging.getLogger("statemachine_wf.dashboard")

PAGE = 50
_SEQ = re.compile(r"[0-9]{1,18}")
WINDOW, BUCKET = 3600.0, 60.0
# The Client methods a POST may name: the action comes from the URL path, so it is looked
# up only among these, never as any attribute of the client (delete, purge).
ACTIONS = ("cancel", "resume", "retry")


def _when(ts: float | None) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def _epoch(text: str | None) -> float | None:
    """An ``<input type=datetime-local>`` value (UTC) as epoch seconds; None if blank."""
    if not text:
        return None
    from datetime import UTC, datetime

    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def create_app(
    store: Store,
    *,
    operator_token: str | None = None,
    workflows: Sequence[type[Workflow[Any, Any]]] = (),
    resync: float = 5.0,
    session_max_age: float = DEFAULT_SESSION_MAX_AGE,
) -> Starlette:
    """The dashboard over ``store``; read-only unless ``operator_token`` is given.

    ``workflows``: classes whose state graphs are drawn from their specs (other types are
    drawn from their logs). ``resync``: seconds a live stream waits before re-reading.
    ``session_max_age``: seconds an operator's sign-in lasts (default 12 hours).
    """
    guard = Guard(operator_token, session_max_age)
    client = Client(store, workflows)
    reads = overview(store)
    specs = {w.spec().workflow_type: w.spec() for w in workflows}
    folder = resources.files("statemachine_wf.dashboard")
    # Jinja2Templates autoescapes .html templates: instance data (inputs, errors, names
    # from DAG definitions) is text on every page, never markup.
    templates = Jinja2Templates(directory=str(folder.joinpath("templates")))
    templates.env.filters["when"] = _when
    templates.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)

    def render(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
        csrf = guard.csrf_value(request)
        response = templates.TemplateResponse(
            request,
            name,
            {
                "csrf": csrf,
                "writable": guard.writable,
                "operator": guard.is_operator(request),
                "statuses": [s.value for s in Status],
                **context,
            },
            status_code=status_code,
        )
        # Set once and then kept, so a form rendered in one tab stays valid after another
        # tab loads a page. HttpOnly: the value reaches forms through the template, and no
        # script needs to read it.
        if request.cookies.get(CSRF_COOKIE) != csrf:
            response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict")
        return response

    async def refuse(request: Request) -> Response | None:
        # Starlette caches the parsed form, so the handler reading it again after this
        # check gets the same fields.
        form = await request.form()
        why = guard.may_change(request, form.get("csrf"))
        if why is None:
            return None
        return render(request, "message.html", status_code=403, title="Refused", message=why)

    async def home(request: Request) -> Response:
        now = time.time()

        def gather() -> dict[str, Any]:
            if reads is None:
                return {}
            return {
                "counts": reads.status_counts(),
                "queue": reads.queue_depth(),
                "letters": reads.dead_letter_counts(),
                "workers": reads.workers(),
                "chart": Markup(
                    graphs.throughput_chart(
                        reads.throughput(since=now - WINDOW, bucket=BUCKET),
                        since=now - WINDOW,
                        now=now,
                        bucket=BUCKET,
                    )
                ),
            }

        return render(request, "home.html", **await run_in_threadpool(gather))

    async def instances(request: Request) -> Response:
        q = request.query_params
        # The query string is anyone's to write: an unknown status is dropped and a bad
        # time ignores the time filter, rather than answering a 500.
        status = [Status(s) for s in q.getlist("status") if s in {x.value for x in Status}]
        try:
            since, until = _epoch(q.get("since")), _epoch(q.get("until"))
        except ValueError:
            since = until = None
        ident = q.get("q") or None
        prefix = q.get("type") or None
        after = q.get("after") or None

        def page() -> list[InstanceRecord]:
            # A store without the overview reads: the first page only, by status and type.
            if reads is None:
                return client.list(status=status or None, type_prefix=prefix, limit=PAGE)
            return reads.page_instances(
                status=status or None,
                type_prefix=prefix,
                since=since,
                until=until,
                ident=ident,
                after=after,
                limit=PAGE,
            )

        rows = await run_in_threadpool(page)
        more = None
        # Keyset paging: the next page starts after the last id shown, so rows started
        # meanwhile never shift a page (OFFSET would show some twice) and a deep page is
        # one index range. A full page may be the last: then "older" shows an empty one.
        if len(rows) == PAGE:
            kept = [(k, v) for k, v in q.multi_items() if k != "after"]
            more = "/instances?" + urlencode([*kept, ("after", rows[-1].id)])
        return render(
            request, "instances.html", rows=rows, more=more, q=q, chosen=set(q.getlist("status"))
        )

    async def instance(request: Request) -> Response:
        instance_id = request.path_params["id"]

        def load() -> tuple[InstanceRecord | None, list[Any]]:
            # The id comes from the URL: a malformed one is InvalidId (a WorkflowError),
            # answered as not found like a well-formed id that names nothing.
            # NotFound only: an outage (StoreUnavailable) is a 503 (see `unavailable`),
            # never "no instance".
            try:
                r = client.get(instance_id)
            except NotFound:
                return None, []
            return r, client.history(instance_id)

        record, events = await run_in_threadpool(load)
        if record is None:
            return render(
                request,
                "message.html",
                404,
                title="Not found",
                message=f"no instance {instance_id}",
            )
        # What the page prints has wait tokens hidden (as ``signals`` does); the graphs are
        # drawn from the events as stored.
        shown = [shown_event(e) for e in events]
        context: dict[str, Any] = {"r": record, "events": shown}
        if record.kind == "dag":
            # The graph is drawn from the definition stored with the instance (its
            # WORKFLOW_CREATED event), not the latest saved version: that is what ran.
            head = events[0].payload if events else {}
            definition = head.get("dag") or {}
            statuses = graphs.node_statuses(events)
            context.update(
                graph=Markup(graphs.dag_graph(definition, statuses)),
                statuses=statuses,
                last_seq=events[-1].seq if events else 0,
                live=not record.status.terminal,
            )
        else:
            spec = specs.get(record.type)
            context.update(
                graph=Markup(
                    graphs.state_graph(
                        spec, events, record.step, done=record.status == Status.COMPLETED
                    )
                ),
                from_spec=spec is not None,
                reconciles=[e for e in shown if e.event_type.startswith("RECONCILE")],
                errors=[e for e in shown if e.error],
            )
        return render(request, "instance.html", **context)

    async def stream(request: Request) -> Response:
        instance_id = request.path_params["id"]
        raw = request.query_params.get("after", "") or "0"
        # ASCII digits only, at most 18 (a seq is a bigint): int() would take "²"-like
        # digits, spaces, "-1" and a 5,000-digit number, or fail with a 500.
        if not _SEQ.fullmatch(raw):
            return PlainTextResponse(
                f"after must be a non-negative integer (an event seq), got {raw[:40]!r}",
                status_code=400,
            )
        after = int(raw)

        async def feed() -> AsyncIterator[str]:
            # The browser reconnects after 2 s if the stream drops; it asks again from the
            # page's "after", and replaying node statuses in order is harmless.
            yield "retry: 2000\n\n"
            try:
                async for u in watch(store, instance_id, after_seq=after, resync=resync):
                    status = graphs.NODE_STATUS_BY_EVENT.get(u.event_type)
                    if status == "completed" and u.payload.get("error"):
                        status = "errored"
                    data = {
                        "seq": u.seq,
                        "event": u.event_type,
                        "node": u.node,
                        "node_status": status,
                        "status": str(u.status),
                        "at": _when(u.event.created_at),
                    }
                    yield f"id: {u.seq}\nevent: update\ndata: {json.dumps(data)}\n\n"
            except StoreUnavailable:
                # Not "gone": the stream just ends, and the browser reconnects (retry).
                return
            except WorkflowError as exc:
                yield f"event: gone\ndata: {json.dumps(str(exc))}\n\n"
                return
            yield "event: end\ndata: {}\n\n"

        # X-Accel-Buffering: nginx would otherwise hold the events back in its buffer.
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(feed(), media_type="text/event-stream", headers=headers)

    async def act(request: Request) -> Response:
        refused = await refuse(request)
        if refused is not None:
            return refused
        instance_id, action = request.path_params["id"], request.path_params["action"]
        form = await request.form()

        def run() -> None:
            if action in ACTIONS:
                getattr(client, action)(instance_id)
            elif action == "signal":
                raw = str(form.get("payload") or "null")
                client.signal(instance_id, str(form.get("name") or ""), json.loads(raw))
            else:
                raise ValueError(f"no action {action!r}")

        # A refusal (bad state, bad payload JSON) is a page saying why; 303 after success
        # turns the POST into a GET, so reloading the page does not repeat the action.
        try:
            await run_in_threadpool(run)
        except StoreUnavailable:
            raise  # not a refusal: a 503 (see `unavailable`)
        except (WorkflowError, ValueError) as exc:
            return render(request, "message.html", 409, title=f"{action} refused", message=str(exc))
        return RedirectResponse(f"/instances/{instance_id}", status_code=303)

    async def dead_letters(request: Request) -> Response:
        letters = await run_in_threadpool(lambda: client.dead_letters(limit=200))
        return render(request, "dead_letters.html", letters=letters)

    async def redrive(request: Request) -> Response:
        refused = await refuse(request)
        if refused is not None:
            return refused
        letter = int(request.path_params["letter"])
        try:
            await run_in_threadpool(lambda: client.redrive(letter, by="dashboard"))
        except StoreUnavailable:
            raise  # not a refusal: a 503 (see `unavailable`)
        except (WorkflowError, ValueError) as exc:
            return render(request, "message.html", 409, title="redrive refused", message=str(exc))
        return RedirectResponse("/dead-letters", status_code=303)

    async def workers(request: Request) -> Response:
        rows = await run_in_threadpool(lambda: reads.workers() if reads else [])
        return render(request, "workers.html", workers=rows, now=time.time())

    async def signers(request: Request) -> Response:
        queues = await run_in_threadpool(client.signers)
        return render(request, "signers.html", queues=queues)

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return render(request, "login.html")
        form = await request.form()
        if not guard.csrf_ok(request, form.get("csrf")):
            return render(
                request, "message.html", 403, title="Refused", message="the CSRF check failed"
            )
        if not guard.token_matches(str(form.get("token") or "")):
            return render(request, "login.html", 403, failed=True)
        response = RedirectResponse("/", status_code=303)
        # max_age: the browser drops it when the server would refuse it anyway.
        response.set_cookie(
            OPERATOR_COOKIE,
            guard.session_value(),
            max_age=math.ceil(guard.session_max_age),
            httponly=True,
            samesite="strict",
        )
        return response

    async def logout(request: Request) -> Response:
        # The CSRF check of every other POST: another site's form must not sign the
        # operator out. Signed in or not does not matter (an expired session may sign out).
        form = await request.form()
        if not guard.csrf_ok(request, form.get("csrf")):
            return render(
                request, "message.html", 403, title="Refused", message="the CSRF check failed"
            )
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(OPERATOR_COOKIE)
        return response

    async def unavailable(request: Request, exc: Exception) -> Response:
        # Any page or action while the database is away: a 503, not a 404 "no instance"
        # nor a 409 "refused". The exception's text names the database's host and port:
        # logged, not shown on a page anyone may read.
        log.warning("dashboard: %s %s: %s", request.method, request.url.path, exc)
        response = render(
            request,
            "message.html",
            503,
            title="Store unavailable",
            message=(
                "The store is unavailable: its database cannot be reached just now. "
                "Try again shortly; after an action, reload the instance to see whether "
                "it was applied."
            ),
        )
        response.headers["Retry-After"] = "5"
        return response

    async def metrics_page(request: Request) -> Response:
        body = await run_in_threadpool(metrics.scrape, reads, store)
        return PlainTextResponse(body, media_type=metrics.CONTENT_TYPE)

    routes = [
        Route("/", home),
        Route("/instances", instances),
        Route("/instances/{id}", instance),
        Route("/instances/{id}/stream", stream),
        Route("/instances/{id}/{action}", act, methods=["POST"]),
        Route("/dead-letters", dead_letters),
        Route("/dead-letters/{letter:int}/redrive", redrive, methods=["POST"]),
        Route("/workers", workers),
        Route("/signers", signers),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/metrics", metrics_page),
        Mount("/static", StaticFiles(directory=str(folder.joinpath("static"))), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={StoreUnavailable: unavailable})
