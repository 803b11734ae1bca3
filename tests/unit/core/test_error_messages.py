"""An error made without a message says one short line, the first paragraph of its class
docstring; a message the caller gives is kept exactly.

Before: the whole docstring was the message, so ``str(InputError())`` and
``str(StoreUnavailable())`` ran to ten lines of indented documentation ("Attributes: ...")
in a log line or a stored error.
"""

from __future__ import annotations

import inspect

import pytest

from statemachine_wf import errors
from statemachine_wf.definition.checks import InvalidId
from statemachine_wf.errors import (
    InputError,
    NotFound,
    Retry,
    StepFailure,
    StoreUnavailable,
    WorkflowError,
)


def _made_without_arguments() -> list[type[WorkflowError]]:
    found: list[type[WorkflowError]] = [InvalidId]
    for _, cls in inspect.getmembers(errors, inspect.isclass):
        if issubclass(cls, WorkflowError):
            try:
                cls()
            except TypeError:
                continue  # needs its arguments (DefinitionError, PayloadTooLarge, ...)
            found.append(cls)
    return found


@pytest.mark.parametrize("cls", _made_without_arguments(), ids=lambda c: c.__name__)
def test_the_default_message_is_the_docstrings_first_paragraph(
    cls: type[WorkflowError],
) -> None:
    message = str(cls())
    first = (cls.__doc__ or "").strip().split("\n\n")[0]
    assert message == " ".join(first.split())
    assert "\n" not in message
    assert "Attributes" not in message
    assert cls().message == message


def test_the_multi_paragraph_docstrings_give_their_first_sentence() -> None:
    assert str(InputError()) == "The input is invalid; nothing was written."
    assert str(StoreUnavailable()) == "The database could not be reached."
    assert (
        str(StepFailure()) == "Base of the exceptions an action raises to classify its own failure."
    )
    assert str(NotFound()) == "No such workflow instance."


def test_a_class_without_a_docstring_is_named() -> None:
    class Bare(WorkflowError):
        pass

    assert str(Bare()) == "Bare"


def test_a_message_given_is_kept_as_it_is() -> None:
    text = "first line\n\n  second paragraph, indented"
    assert str(WorkflowError(text)) == text
    assert str(InputError(text, fields=(("a", "b"),))) == text
    assert InputError(text, fields=(("a", "b"),)).fields == (("a", "b"),)
    unavailable = StoreUnavailable("postgres: PoolTimeout", lost=False)
    assert (str(unavailable), unavailable.lost) == ("postgres: PoolTimeout", False)
    retry = Retry("rate limited", code="http_429")
    assert (str(retry), retry.code) == ("rate limited", "http_429")
    assert Retry().code == "retry"
