"""A runner's cache of the DAG instances it runs: each one's graph, folded log and state.

The executor decides on the cache, not on a fresh read. An entry is current for the
version it holds, because only two things write it:

* a read (:meth:`DagCache.read`): the instance's version first, then the log's tail
  after the cached view, folded in (the first read of an instance reads the whole log
  and parses its definition, immutable for the instance, once);
* this runner's own commit (:meth:`DagCache.fold`), made on the cached version: the
  store returns the seqs its events took, and they are folded in at those seqs with the
  new version, status and node tasks. The commit's CAS held, so nobody else changed the
  version in between, and what commits next comes after these events in the log.

A third leaves it behind: a commit its blockers vouched for, made at a later version
(other runners committed meanwhile). Its events are not folded in (the view would skip
the others' before them); the entry keeps its older version, marked ``behind``, and is
used only for what needs no newer one until the next read.

What neither brings in at once are the claims' ``NODE_STARTED`` (a claim does not bump
the version): they count a node's tries only, and the next read folds them in
(``LogView.extend`` skips the runner's own events, which it reads again then).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable

from ..core import dag_interpret as interpret
from ..core.dag_interpret import DagDecision, LogView
from ..core.dag_vouch import blockers
from ..core.evolve import evolve
from ..core.store import Claim, DagApplied, DagSnapshot, InstanceRecord, Store
from ..definition.dag_models import Graph

Make = Callable[[DagSnapshot, LogView], DagDecision | None]
"""Decides a completion on an instance and its folded log (None: nothing to write)."""

CACHED_INSTANCES = 512
"""Instances whose parsed graph and folded log a runner keeps (least recently used go)."""

CACHED_GRAPHS = 64
"""Parsed graphs a runner keeps, by their definition's content (least recently used go):
the instances of one definition share one graph, parsed and indexed once."""


class Cached:
    """One instance as this runner last read or committed it."""

    __slots__ = ("behind", "contended", "graph", "lock", "queue", "queue_lock", "state", "view")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        """Serialises this runner's threads on the instance: they never lose a CAS to
        each other, and the entry changes under one of them at a time."""
        self.queue: list[Pending] = []
        """Completions waiting for the lock, committed together by whoever takes it next
        (``dag_group.Grouper``); guarded by ``queue_lock``, not ``lock``."""
        self.queue_lock = threading.Lock()
        self.view: LogView | None = None
        self.graph: Graph | None = None
        self.state: DagSnapshot | None = None
        """The instance (its version, status and node tasks) the view is current for."""
        self.contended = False
        """Whether another runner committed on the instance while this one worked on it
        (a lost CAS, or a commit that found the version moved): its plain completions
        then name their blockers (``dag_vouch.blockers``)."""
        self.behind = False
        """Whether this runner committed on the instance at a later version than the
        entry's (its blockers vouched): the view is still a prefix of the log but lacks
        the tail, this commit's events among it. Decisions its blockers vouch for may be
        made on it; anything else reads first (``DagExecutor._commit_loop``)."""

    def first_try(self, node: str, claim: Claim) -> bool:
        """Whether ``claim`` is the first try of a run of ``node`` the view holds
        dispatched and nothing more: then the view, a prefix of the log (behind it,
        maybe), holds everything the run reads (what came before its dispatch), outside
        loops and delay nodes (whose timers the view may lack)."""
        view, graph = self.view, self.graph
        if view is None or graph is None or claim.task.attempt != 1 or view.tries.get(node, 0):
            return False
        if graph.scope[node] is not None or graph.nodes[node].type in ("loop", "delay"):
            return False
        run = view.run(node)
        return run > 0 and view.completion(node, run) is None and (node, run) not in view.failed

    def vouches(self, decision: DagDecision, state: DagSnapshot) -> bool:
        """Whether open tasks vouch for ``decision``, made on this entry (``blockers``)."""
        if self.graph is None or self.view is None:
            return False
        return bool(blockers(self.graph, self.view, decision, state.open_slots))


class Pending:
    """One thread's completion, queued on its instance's cache entry until committed
    (``dag_group.Grouper``)."""

    __slots__ = ("claim", "done", "error", "free", "make", "more", "result", "want")

    def __init__(self, make: Make, free: bool, want: int = 1) -> None:
        self.make = make
        self.free = free
        """Whether its worker may take its next node in the commit (its streak allows)."""
        self.want = want
        """How many due siblings its worker takes when free (a run of branches: several)."""
        self.done = False
        self.result = False
        """True: committed; False: nothing to write (see ``DagExecutor.complete``)."""
        self.claim: Claim | None = None
        """The node leased to its worker in the commit, if any."""
        self.more: list[Claim] = []
        """The further siblings leased to its worker (``want`` above one)."""
        self.error: Exception | None = None


class DagCache:
    """The entries of one runner, least recently used evicted past :data:`CACHED_INSTANCES`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._entries: OrderedDict[str, Cached] = OrderedDict()
        self._graphs: OrderedDict[bytes, Graph] = OrderedDict()
        self._parsing: dict[bytes, threading.Event] = {}
        """The graphs being parsed, by key: set once each is cached (or its parse failed)."""
        self._lock = threading.Lock()

    def graph(self, view: LogView) -> Graph:
        """The graph of the instance whose log ``view`` folds (``view.graph()``), parsed
        once for every instance of its definition: checking and indexing a 100-node
        definition costs about 2 ms, and a graph's indexes (the joins' edges split, the
        loops) are built on first use. A graph is immutable, so instances share it. Keyed
        by a digest of the definition's JSON text, which costs about a sixth of a parse;
        the text itself is not kept (a definition may be megabytes). Threads that need
        the same graph while it is being parsed wait for that parse (a runner's workers
        first read a definition's instances together: each parsed it, three times a
        process in a four-process fan-out run)."""
        text = json.dumps(view.definition, separators=(",", ":"))
        key = hashlib.blake2b(text.encode(), digest_size=32).digest()
        while True:
            with self._lock:
                graph = self._graphs.get(key)
                if graph is not None:
                    self._graphs.move_to_end(key)
                    return graph
                parsing = self._parsing.get(key)
                if parsing is None:
                    parsing = self._parsing[key] = threading.Event()
                    break
            # Parsed by another thread: its graph is cached once this is set. A parse that
            # failed caches nothing, and this thread parses (and fails) in turn.
            parsing.wait()
        try:
            graph = view.graph()
            with self._lock:
                self._graphs[key] = graph
                while len(self._graphs) > CACHED_GRAPHS:
                    self._graphs.popitem(last=False)
            return graph
        finally:
            with self._lock:
                del self._parsing[key]
            parsing.set()

    def entry(self, instance_id: str) -> Cached:
        with self._lock:
            entry = self._entries.get(instance_id)
            if entry is None:
                entry = self._entries[instance_id] = Cached()
                while len(self._entries) > CACHED_INSTANCES:
                    self._entries.popitem(last=False)
            else:
                self._entries.move_to_end(instance_id)
            return entry

    def forget(self, instance_id: str) -> None:
        with self._lock:
            self._entries.pop(instance_id, None)

    def read(self, entry: Cached, instance_id: str) -> DagSnapshot | None:
        """Read the instance and its log's tail after the cached view; fold it in. None
        (and the entry forgotten) when the instance is gone. Call with ``entry.lock``."""
        after = 0 if entry.view is None else entry.view.last_seq
        snap = self.store.dag_snapshot(instance_id, after_seq=after)
        if snap is None:
            self.forget(instance_id)
            return None
        if entry.view is None:
            view = LogView.of(snap.events)
            entry.graph = self.graph(view)
            entry.view = view
        else:
            entry.view.extend(snap.events)
        entry.state = DagSnapshot(snap.instance, [], snap.open_slots)  # the log is in the view
        entry.behind = False
        return snap

    @staticmethod
    def fold(
        entry: Cached, state: DagSnapshot, decided: DagDecision, applied: DagApplied
    ) -> InstanceRecord:
        """The entry after this runner committed ``decided`` on ``state`` (the entry's
        own, or a read of the same version): its events at their seqs, the new version and
        status, the node tasks it deleted and added. Call with ``entry.lock``. The
        instance as the commit left it (one copy of the row a node: it took 14 µs)."""
        status = decided.status or state.instance.status
        instance = evolve(state.instance, version=applied.version, status=status)
        if entry.view is None:
            return instance
        entry.view.committed(decided.events, applied.seqs)
        for task in (applied.task, *applied.more):  # siblings' NODE_STARTED, by the store
            if task is not None:
                entry.view.started(task.slot, task.attempt)
        entry.state = DagSnapshot(instance, [], interpret.open_after(state.open_slots, decided))
        return instance
