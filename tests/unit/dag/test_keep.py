"""``runtime.dag_keep.Keeper``: how many dispatched node tasks a runner keeps to itself
(those its workers will start within ``dag_sticky``, by what it measured of each node)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from statemachine_wf.core.dag_interpret import DagDecision, NodeTask
from statemachine_wf.definition.dag_models import check
from statemachine_wf.runtime.dag_keep import WEIGHT, Keeper, work
from tests.integration.dag.helpers import fan_out

BRANCHES = ["python:fetch"] * 64


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def keeper(workers: int = 8, window: float = 1.0) -> tuple[Keeper, Clock]:
    clock = Clock()
    return Keeper(workers, lambda: window, clock), clock


def measured(k: Keeper, seconds: float, work: str = "python:fetch") -> None:
    k.ran(work, seconds)


def test_nodes_not_yet_measured_are_all_kept() -> None:
    k, _ = keeper()
    assert k.keep(BRANCHES) == (None, 0.0)
    measured(k, 10.0, "python:other")
    assert k.keep(BRANCHES) == (None, 0.0)  # another function's measure


def test_with_no_window_it_keeps_them_all() -> None:
    k, _ = keeper(window=0.0)
    measured(k, 10.0)
    assert k.keep(BRANCHES) == (None, 0.0)


def test_fast_nodes_are_all_kept() -> None:
    k, _ = keeper()
    measured(k, 0.001)  # 8,000 a second on eight workers
    assert k.keep(BRANCHES)[0] is None
    assert k.keep(BRANCHES)[0] is None


def test_slow_nodes_are_kept_only_as_many_as_the_workers_start_within_the_window() -> None:
    k, _ = keeper(workers=8, window=1.0)
    measured(k, 0.2)  # 40 a second on eight workers
    kept, seconds = k.keep(BRANCHES)
    assert kept == 40
    assert abs(seconds - 1.0) < 1e-9
    # Those fill the window: a commit at the same moment keeps none.
    assert k.keep(BRANCHES)[0] == 0


def test_each_node_counts_what_it_measured() -> None:
    k, _ = keeper(workers=1, window=1.0)
    k.ran("slow", 0.9)
    k.ran("fast", 0.0)
    assert k.keep(["fast", "slow", "fast", "slow"])[0] == 3


def test_the_backlog_drains_with_time() -> None:
    k, clock = keeper(workers=2, window=1.0)
    measured(k, 0.5)  # four a second on two workers
    assert k.keep(BRANCHES)[0] == 4
    clock.now += 0.5  # half of that work done
    assert k.keep(BRANCHES)[0] == 2
    clock.now += 10
    assert k.keep(BRANCHES)[0] == 4  # never below empty


def test_a_lost_commit_gives_its_kept_work_back() -> None:
    k, _ = keeper(workers=2, window=1.0)
    measured(k, 0.5)
    kept, seconds = k.keep(BRANCHES)
    assert kept == 4
    k.give_back(seconds)
    assert k.keep(BRANCHES)[0] == 4


def test_a_node_s_measure_is_an_average_that_follows_the_newest() -> None:
    k, _ = keeper(workers=1, window=1.0)
    k.ran("python:fetch", 0.3)
    k.ran("python:fetch", 0.8)
    mean = 0.3 + WEIGHT * (0.8 - 0.3)
    assert k.keep(["python:fetch"] * 10)[0] == int(1.0 / mean)


def test_a_commit_that_dispatches_nothing_keeps_nothing() -> None:
    k, _ = keeper()
    measured(k, 0.5)
    assert k.keep([]) == (None, 0.0)


def test_a_node_s_work_is_what_it_calls_whatever_its_id() -> None:
    graph = check(fan_out(2))  # s -> b0, b1 -> e; both branches call "add"
    assert work(graph, "b0") == work(graph, "b1") == "python:add"
    assert work(graph, "s") == "start"


def test_a_commit_counts_the_work_of_the_nodes_it_dispatches() -> None:
    graph = check(fan_out(3))
    decision = DagDecision(dispatch=tuple(NodeTask(f"b{i}") for i in range(3)))
    k, _ = keeper(workers=1, window=1.0)
    k.ran("python:add", 0.4)
    assert k.for_commit(graph, decision, "i1", handed=False)[0] == 2  # 0.4 s each
    # A task handed to the committing worker is leased to it, not kept; an instance
    # whose graph this runner does not know keeps them all, uncounted.
    assert k.for_commit(graph, decision, "i1", handed=True) == (None, 0.0)
    assert k.for_commit(None, decision, "i1", handed=False) == (None, 0.0)


def test_work_kept_blind_is_given_back_once_measured_but_what_the_workers_start() -> None:
    k, clock = keeper(workers=8, window=1.0)
    assert k.keep(BRANCHES, "i1") == (None, 0.0)  # not measured yet: all 64 kept
    clock.now += 0.2
    # The first branch took 0.2 s: in the 0.8 s left the eight workers start 32 more.
    assert k.ran("python:fetch", 0.2) == [("i1", 32)]
    # Said once: the next measure of the same work gives nothing back.
    assert k.ran("python:fetch", 0.2) == []


def test_fast_work_kept_blind_is_all_kept() -> None:
    k, clock = keeper(workers=8, window=1.0)
    k.keep(BRANCHES, "i1")
    clock.now += 0.01
    assert k.ran("python:fetch", 0.0005) == []


def test_blind_keeps_of_several_instances_share_the_workers() -> None:
    k, _ = keeper(workers=2, window=1.0)
    k.keep(["python:fetch"] * 10, "i1")
    k.keep(["python:fetch"] * 10, "i2")
    assert k.ran("python:fetch", 0.5) == [("i1", 4), ("i2", 0)]


def test_a_blind_keep_older_than_the_window_is_left_alone() -> None:
    k, clock = keeper(workers=2, window=1.0)
    k.keep(["python:fetch"] * 10, "i1")
    clock.now += 1.5  # anyone's by now: nothing to give back
    assert k.ran("python:fetch", 0.5) == []
    k.keep(["python:other"] * 10, "i1")
    clock.now += 1.5
    k.keep(["python:other"] * 10, "i2")  # the old one is dropped as this one is added
    assert k.ran("python:other", 0.5) == [("i2", 4)]


def test_only_the_work_not_yet_measured_is_kept_blind() -> None:
    k, _ = keeper(workers=1, window=1.0)
    k.ran("python:known", 0.25)
    kept, _ = k.keep(["python:known", "python:new", "python:known"], "i1")
    assert kept is None  # 0.5 s of known work; the new one counts as none yet
    assert k.ran("python:known", 0.25) == []
    assert k.ran("python:new", 1.0) == [("i1", 0)]  # 0.5 s left: not even one more


@given(
    workers=st.integers(1, 16),
    window=st.floats(0.0, 5.0),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["ran", "keep", "wait"]),
            st.sampled_from(["python:a", "python:b"]),
            st.floats(0.0, 3.0),
            st.integers(0, 50),
        ),
        max_size=30,
    ),
)
def test_what_is_kept_never_overfills_the_window(
    workers: int, window: float, steps: list[tuple[str, str, float, int]]
) -> None:
    # Whatever the order of measures, commits and waits: a commit keeps at most what it
    # dispatched, the measured work it keeps fits in the window, and what the first
    # measure of blind work leaves kept is at most what was kept blind.
    clock = Clock()
    k = Keeper(workers, lambda: window, clock)
    blind: dict[str, int] = {}
    for i, (what, work_, seconds, n) in enumerate(steps):
        if what == "wait":
            clock.now += seconds
        elif what == "ran":
            for _, left in k.ran(work_, seconds):
                assert 0 <= left < blind.get(work_, 0) + 1
            blind.pop(work_, None)
        else:
            measured = work_ in k._mean
            kept, added = k.keep([work_] * n, f"i{i}")
            count = n if kept is None else kept
            assert 0 <= count <= n
            assert added <= window + 1e-6
            if not measured and count and window > 0:
                blind[work_] = max(blind.get(work_, 0), count)
