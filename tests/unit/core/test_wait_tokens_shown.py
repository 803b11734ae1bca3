"""The one rule for showing a wait's token: only whether there is one, and only on the
events that carry a wait's token (a workflow's own ``token`` field is its data)."""

from __future__ import annotations

from statemachine_wf.definition.events import Ev, EventRecord
from statemachine_wf.definition.wait_tokens import hide_token, shown_event, token_label


def _event(event_type: str, payload: dict[str, object]) -> EventRecord:
    return EventRecord(1, "i", event_type, "ask", 1, payload, None, None, 0.0)


def test_a_wait_token_is_shown_as_whether_there_is_one() -> None:
    assert hide_token({"wait": "0", "token": "s3cret", "until": None}) == {
        "wait": "0",
        "tokened": True,
        "until": None,
    }
    assert list(hide_token({"a": 1, "token": None, "b": 2})) == ["a", "tokened", "b"]
    assert hide_token({"token": None})["tokened"] is False
    assert hide_token({"x": 1}) == {"x": 1}
    assert (token_label("s3cret"), token_label(None)) == ("token", "no token")
    for event_type in (Ev.WAIT_TOKEN, Ev.STEP_WAITING):
        shown = shown_event(_event(event_type, {"wait": "0", "token": "s3cret"}))
        assert shown.payload == {"wait": "0", "tokened": True}
        assert (shown.seq, shown.event_type, shown.node) == (1, event_type, "ask")


def test_other_events_keep_their_own_token_field() -> None:
    own = _event(Ev.STEP_COMPLETED, {"token": "0x5FbDB2315678afecb367f032d93F642f64180aa3"})
    assert shown_event(own) is own
