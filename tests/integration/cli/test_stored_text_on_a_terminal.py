"""Stored data on a terminal is printed as the text it is: square brackets in a payload or
a DAG definition's name are not rich markup (no error, no styling, no hyperlink)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from statemachine_wf import COMPLETED, Client, StepContext, Store, Workflow, step
from statemachine_wf.cli import main
from tests.integration.cli.test_json_and_tables import _on_a_terminal

# A closing tag with no opening one (rich raises MarkupError on it), a style and a link.
MARKUP = "[/x] [bold]loud[/bold] [link=https://evil.example]click[/link]"


class Text(BaseModel):
    text: str


class Nothing(BaseModel):
    pass


class Echo(Workflow[Text, Nothing]):
    workflow_type = "test.markup.v1"

    @step(initial=True, to=COMPLETED)
    def only(self, ctx: StepContext[Text, Nothing]) -> str:
        return COMPLETED


def test_history_prints_a_payload_with_brackets_as_text(store: Store, argv: list[str]) -> None:
    instance_id = Client(store, [Echo]).start(Echo, {"text": MARKUP})
    shown = _on_a_terminal(argv, "history", instance_id, columns=400)
    assert "MarkupError" not in shown
    assert json.dumps(MARKUP) in shown  # the payload as stored, brackets and all
    assert "\x1b]8;" not in shown  # no OSC 8 hyperlink was made of it


def test_dag_show_prints_a_name_with_brackets_as_text(
    store: Store, argv: list[str], tmp_path: Path
) -> None:
    name = "[/x]orders [bold]b[/bold]"
    definition = {
        "name": name,
        "nodes": [
            {"id": "s", "type": "start"},
            {"id": "e", "type": "end", "config": {"outputs": {"note": "[/y]"}}},
        ],
        "edges": [{"source": "s", "target": "e"}],
    }
    path = tmp_path / "d.json"
    path.write_text(json.dumps(definition))
    assert main([*argv, "dag", "save", str(path)]) == 0
    shown = _on_a_terminal(argv, "dag", "show", name, columns=300)
    assert f"{name}  version 1" in shown
    assert '"[/y]"' in shown  # a node's config, as stored
    listed = _on_a_terminal(argv, "dag", "list", columns=300)
    assert name in listed
