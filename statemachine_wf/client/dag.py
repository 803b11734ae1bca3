"""Saved DAG definitions (immutable versions), and starting, inspecting and test runs.

Starting records intent and returns at once, like :class:`~statemachine_wf.Client`:
the instance, its WORKFLOW_CREATED event carrying the definition it will run, the
start node's NODE_DISPATCHED and its task, in one commit. A running instance reads its
definition from its own log, so saving a new version never changes it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from ..core import dag_interpret as interpret
from ..core.dag_interpret import LogView
from ..core.store import InstanceRecord, NewDagInstance, Store
from ..definition.checks import check_id, check_priority, check_text
from ..definition.dag_definition import DagDefinition
from ..definition.dag_models import Graph, check, load_graph
from ..definition.events import EventRecord, Status
from ..definition.ids import new_instance_id
from ..definition.limits import check_payload, check_value
from ..errors import InputError, InvalidState, NotFound, TypeKindConflict
from ..runtime import operations
from ..runtime.dag_handlers import Registry
from ..runtime.observe import trace_context
from . import live

log = logging.getLogger(__name__)

CHECKED_KEPT = 64
"""Definitions a :class:`DagClient` keeps checked (their graphs), by name."""

_Checked = tuple[DagDefinition, Graph, dict[str, Any]]
"""A definition as checked, its graph, and its dump (:meth:`DagDefinition.dump`)."""


class DagClient:
    """Save DAG definitions and run them.

    Args:
        store: the store the runners use.
        registry: the registry the runners use, if known here: then a definition whose
            ``sub_workflow`` nodes start a workflow it does not allow is refused
            (:class:`DefinitionError`) when saved, started or test-run. Without it the
            runner refuses such a node when it runs (no child is created).
    """

    def __init__(self, store: Store, registry: Registry | None = None) -> None:
        self.store = store
        self.registry = registry
        # A start reuses the checks of the last definition of its name that was the same
        # to the letter (its JSON): a hundred-node graph's checks cost a millisecond. With
        # them its dump, the JSON form WORKFLOW_CREATED carries (0.1 ms for that graph):
        # only read after (encoded by the store), never changed, so shared by the starts.
        self._checked: dict[str, tuple[dict[str, Any], _Checked]] = {}
        self._checked_lock = threading.Lock()
        # DAG types a runner registered: a type is one kind for good (the database refuses
        # a name registered as both), so a start of one of these reads the registry no more.
        self._hosted: set[str] = set()
        self._warned: set[str] = set()

    def _checked_once(self, raw: dict[str, Any], checking: Callable[[], _Checked]) -> _Checked:
        """The checks of ``raw`` (a definition's JSON): those of the last definition of its
        name if it was the same to the letter, else ``checking()``'s, kept for the next."""
        kept = self._checked.get(raw.get("name", "")) if isinstance(raw, dict) else None
        if kept is not None and kept[0] == raw:
            return kept[1]
        found = checking()
        checked = found[0]
        with self._checked_lock:
            if len(self._checked) >= CHECKED_KEPT and checked.name not in self._checked:
                self._checked.pop(next(iter(self._checked)))
            self._checked[checked.name] = (raw, found)
        return found

    def _check_saved(self, raw: dict[str, Any]) -> _Checked:
        checked = DagDefinition.model_validate(raw)
        # Saved under whatever registry the saver had, if any: checked against ours.
        if self.registry is not None:
            self.registry.check_definition(checked)
        return checked, check(checked), checked.dump()

    def _load(self, definition: DagDefinition | Mapping[str, Any] | str) -> _Checked:
        checked, graph = load_graph(definition)
        if self.registry is not None:
            self.registry.check_definition(checked)
        return checked, graph, checked.dump()

    # -- definitions -----------------------------------------------------------------------
    def save(self, definition: DagDefinition | Mapping[str, Any] | str) -> int:
        """Validate and store ``definition`` as the next version of its name.

        Raises:
            DefinitionError: listing every problem; nothing is stored.
        """
        checked, _, dumped = self._load(definition)
        return self.store.dag_save(checked.name, dumped)

    def definition(self, name: str, version: int | None = None) -> tuple[int, DagDefinition]:
        """``(version, definition)``: that version, or the latest. Raises :class:`NotFound`."""
        saved_version, raw = self._saved(name, version)
        return saved_version, DagDefinition.model_validate(raw)

    def _saved(self, name: str, version: int | None) -> tuple[int, dict[str, Any]]:
        found = operations.once_more(lambda: self.store.dag_definition(name, version))  # a read
        if found is None:
            which = "any version" if version is None else f"version {version}"
            raise NotFound(f"no saved DAG {name!r} ({which})")
        return found[0], found[1]

    def definitions(self) -> list[tuple[str, int]]:
        """Every saved name with its latest version."""
        return operations.once_more(self.store.dag_definitions)  # a read

    def delete(self, name: str, *, cascade: bool = False) -> int:
        """Delete every version of ``name``.

        Refuses (:class:`InvalidState`) while instances of it exist, unless ``cascade``,
        which deletes them -- logs, tasks and all -- in the same transaction.
        """
        return self.store.dag_delete(name, cascade=cascade)

    # -- runs ------------------------------------------------------------------------------
    def start(
        self,
        definition: str | DagDefinition,
        input: Mapping[str, Any] | None = None,
        *,
        version: int | None = None,
        idempotency_key: str | None = None,
        priority: int = 100,
        instance_id: str | None = None,
    ) -> str:
        """Start a saved definition (by name; the latest version unless ``version``).

        A :class:`DagDefinition` object is run as given (checked first), recorded under its
        name without a version.
        """
        saved_version: int | None = None
        if isinstance(definition, str):
            saved_version, raw = self._saved(definition, version)
            found = self._checked_once(raw, lambda: self._check_saved(raw))
        elif isinstance(definition, DagDefinition):
            found = self._checked_once(definition.dump(), lambda: self._load(definition))
        else:
            found = self._load(definition)
        return self._start(
            found,
            input,
            version=saved_version,
            test=False,
            idempotency_key=idempotency_key,
            priority=priority,
            instance_id=instance_id,
        )

    def test_run(
        self,
        definition: DagDefinition | Mapping[str, Any] | str,
        input: Mapping[str, Any] | None = None,
        *,
        instance_id: str | None = None,
    ) -> str:
        """Run an unsaved graph (the editor's test run); :meth:`stop_test_run` deletes it."""
        return self._start(
            self._load(definition), input, version=None, test=True, instance_id=instance_id
        )

    def stop_test_run(self, instance_id: str) -> None:
        """Delete a test run's instance, log and tasks in one transaction.

        Raises:
            NotFound: no test run with that id (a saved definition's run is never deleted
                this way).
        """
        check_id(instance_id)
        if not self.store.dag_delete_test_run(instance_id):
            raise NotFound(f"no test run {instance_id!r}")

    def _start(
        self,
        found: _Checked,
        input: Mapping[str, Any] | None,
        *,
        version: int | None,
        test: bool,
        idempotency_key: str | None = None,
        priority: int = 100,
        instance_id: str | None = None,
    ) -> str:
        definition, graph, dumped = found
        check_priority(priority)
        check_text(idempotency_key, "idempotency_key")
        if instance_id is not None:
            check_id(instance_id)
        if input is not None and not isinstance(input, Mapping):
            raise InputError(f"input must be a mapping, got {type(input).__name__}")
        data = dict(input or {})
        check_value("input", data)
        self._check_type(definition.type)
        check_payload("input", data)  # the limit Client.start enforces, before any write
        created = {
            "input": data,
            "dag": dumped,
            "ref": {"name": definition.name, "version": version, "test": test},
        }
        new_id, created_now = self.store.dag_create(
            NewDagInstance(
                id=instance_id or new_instance_id(),
                type=definition.type,
                input=data,
                start=graph.start,
                events=tuple(interpret.start_events(graph, created)),
                name=definition.name,
                version=version,
                test=test,
                idempotency_key=idempotency_key,
                priority=priority,
                trace_context=trace_context(),
            )
        )
        # A known key inserted nothing, and it may be a state machine's key: never
        # return that instance as this DAG's run.
        if not created_now:
            existing = self.get(new_id, include_deleted=True)
            if existing.kind != "dag":
                raise InputError(
                    f"idempotency key {idempotency_key!r} already started a {existing.type} "
                    f"({new_id})"
                )
        return new_id

    def _check_type(self, type_name: str) -> None:
        """A DAG's task type must not name a state-machine workflow type.

        Every type is one kind only (the database refuses a name registered as both), so
        such a DAG could never run; it is refused here so that its author hears why. A
        type no DAG runner has registered yet is started, with a warning: it waits until
        a runner with that type among its ``dag_types`` starts (``status`` says so too).
        """
        if type_name in self._hosted:
            return
        if type_name in self.store.registered_types():
            raise TypeKindConflict(type_name, "state-machine", "DAG")
        if type_name in self.store.registered_types("dag"):
            self._hosted.add(type_name)
        elif type_name not in self._warned:  # once a client: a loop of starts, one line
            self._warned.add(type_name)
            log.warning(
                "no runner has registered the DAG type %r yet: its instances wait until a "
                "runner with it among its dag_types starts (worker --dag-type %s)",
                type_name,
                type_name,
            )

    # -- reading ---------------------------------------------------------------------------
    def get(self, instance_id: str, *, include_deleted: bool = False) -> InstanceRecord:
        """The instance row, as :meth:`Client.get <statemachine_wf.Client.get>` gives it.

        Raises:
            NotFound: no such instance, or it was soft-deleted (unless ``include_deleted``).
        """
        return operations.get(self.store, instance_id, include_deleted=include_deleted)

    def history(self, instance_id: str, *, include_deleted: bool = False) -> list[EventRecord]:
        self.get(instance_id, include_deleted=include_deleted)
        return operations.once_more(lambda: self.store.events(instance_id))  # a read

    def context(self, instance_id: str) -> dict[str, Any]:
        """The instance's context: the fold of its log (input, then node outputs)."""
        return LogView.of(self.history(instance_id)).context()

    def output(self, instance_id: str) -> dict[str, Any] | None:
        """The workflow output (the end node's), once the instance has COMPLETED."""
        record = self.get(instance_id)
        if record.status != Status.COMPLETED:
            return None
        out = record.progress.get("output")
        return dict(out) if isinstance(out, Mapping) else None

    def executions(self, instance_id: str) -> dict[str, int]:
        """How many times each node completed (a loop body: once per iteration)."""
        view = LogView.of(self.history(instance_id))
        return {node: len(runs) for node, runs in view.completions.items()}

    def wait(
        self, instance_id: str, *, timeout: float = 30.0, statuses: Sequence[Status] | None = None
    ) -> InstanceRecord:
        """Poll until the instance reaches one of ``statuses`` (default: terminal)."""
        return operations.wait(self.get, instance_id, timeout=timeout, statuses=statuses)

    def cancel(self, instance_id: str) -> InstanceRecord:
        """Cancel a DAG instance now; its running sub-workflows are cancelled too.

        One commit makes it CANCELLED (terminal) and removes every open node task; a node
        still running sees :meth:`NodeContext.cancel_requested` turn true and whatever it
        reports later is a no-op. Then each active child is cancelled. Cancelling an
        instance that is already CANCELLED only finishes cancelling its children.

        Raises:
            NotFound: no such instance.
            InvalidState: it is not a DAG instance, or it already COMPLETED or FAILED.
        """
        record = self.get(instance_id, include_deleted=True)
        if record.kind != "dag":
            raise InvalidState(f"instance {instance_id} is not a DAG instance")
        return operations.engine(record).cancel(self.store, instance_id)

    def watch(self, instance_id: str, *, after_seq: int = 0) -> AsyncIterator[live.Update]:
        """Its events as they commit, until it ends: :func:`statemachine_wf.client.live.watch`."""
        check_id(instance_id)
        return live.watch(self.store, instance_id, after_seq=after_seq)
