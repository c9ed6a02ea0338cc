"""The store on SQLite and PostgreSQL: the migrations build the ORM's schema, tokens,
requests and their visibility, the runner's reports (a replayed packet stored once), and
requeueing after a restart."""

from __future__ import annotations

import pickle
import threading
from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import func, select, text

from datasched.service.contracts import (
    ElementaryJob,
    FieldError,
    FileRef,
    JobState,
    MetaJobRequest,
    PacketDone,
    ProcessorWork,
)
from datasched.service.daemon import StoreListener
from datasched.service.store import ops, refused
from datasched.service.store.db import Store, database_url, make_engine, upgrade
from datasched.service.store.models import Base, Packet
from datasched.service.users import (
    Caller,
    UserError,
    add_user,
    authenticate,
    issue_token,
    list_groups,
    list_users,
    remove_user,
    removed_users,
    set_user,
)
from svc_support import one_running_job


def test_the_migrations_build_exactly_the_orm_schema_and_run_once(empty_db_url: str) -> None:
    store = Store(empty_db_url)
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    store.close()
    store = Store(empty_db_url)  # at head already: nothing to do
    with store.engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == "0005"
    store.close()


def test_a_store_of_the_previous_schema_is_upgraded_with_its_packets(empty_db_url: str) -> None:
    # A store at 0002 (before packets kept when they began), holding a packet.
    engine = make_engine(empty_db_url)
    upgrade(engine, "0002")
    engine.dispose()
    old = Store(empty_db_url, migrate=False)
    # Its user written as that schema has it (the ORM's User has columns added since).
    with old.engine.begin() as conn:
        conn.execute(text("INSERT INTO groups (name, priority, quota) VALUES ('g', 1, 1)"))
        conn.execute(
            text(
                "INSERT INTO users (name, group_id, admin, token_id, token_salt, token_hash,"
                " created) VALUES ('ann', 1, false, 'ann', '', '', :c)"
            ),
            {"c": datetime(2026, 11, 1, tzinfo=UTC)},
        )
    rid = _request(old, "ann", n_jobs=1, caller=Caller(1, "ann", "g", False))
    with old.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO packets (job_id, url, start, stop, node, n_bytes, cpu_s, created)"
                " VALUES (:j, :u, 0, 10, 'w1', 100, 0.5, :c)"
            ),
            {"j": f"{rid}.0", "u": "/d/ann0.root", "c": datetime(2026, 11, 1, tzinfo=UTC)},
        )
    old.close()
    store = Store(empty_db_url)  # upgrades to the head
    with store.engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == "0005"
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    now = datetime.now(UTC).timestamp()
    listener = StoreListener(store)
    listener.packet_done(
        PacketDone(f"{rid}.0", "/d/ann0.root", 10, 20, "w1", 10, 0.1, None, now - 2, now - 1)
    )
    # A worker's clock ahead of the daemon's: never later than when it was stored.
    listener.packet_done(
        PacketDone(f"{rid}.0", "/d/ann0.root", 20, 25, "w1", 10, 0.1, None, now + 60)
    )
    with store.reading() as s:
        rows = s.execute(
            select(Packet.start, Packet.started, Packet.slotted, Packet.created).order_by(
                Packet.start
            )
        ).all()
    assert [r.start for r in rows] == [0, 10, 20]
    assert rows[0].started is None  # stored before: no time, and none made up
    assert rows[0].slotted is None
    began = [_aware(r.started).timestamp() for r in rows[1:]]
    assert began[0] == pytest.approx(now - 2, abs=1e-3)
    assert began[1] <= _aware(rows[2].created).timestamp() + 1e-3
    # When it got its slot, a second after it began; the other packet's is not known.
    assert _aware(rows[1].slotted).timestamp() == pytest.approx(now - 1, abs=1e-3)
    assert rows[2].slotted is None
    with store.reading() as s:  # the user, stored before users were removed, is not
        assert [u.name for u in list_users(s)] == ["ann"]
    store.close()


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def test_a_path_is_a_sqlite_file_and_postgres_urls_use_psycopg() -> None:
    assert database_url("x.db").startswith("sqlite:////")
    assert database_url("postgresql://u@h/d") == "postgresql+psycopg://u@h/d"


def test_a_token_names_its_user_and_only_the_newest_works(store: Store) -> None:
    with store.session() as s:
        token = add_user(s, "ann", "physics", admin=True)
        other = add_user(s, "bob", "physics")
    with store.session() as s:
        ann = authenticate(s, token)
        assert ann is not None
        assert ann.name == "ann"
        assert ann.admin
        assert ann.group == "physics"
        bob = authenticate(s, other)
        assert bob is not None
        assert bob.name == "bob"
        assert not bob.admin
        assert authenticate(s, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
        assert authenticate(s, "nonsense") is None
        # The secret is not stored: no column holds the token or its secret part.
        secret = token.split("_", 2)[2]
        assert all(secret not in (u.name + u.group) for u in list_users(s))
    with store.session() as s:
        with pytest.raises(UserError, match="exists"):
            add_user(s, "ann", "physics")
        newer = add_user(s, "ann", "physics", new_token=True)
    with store.session() as s:
        assert authenticate(s, token) is None
        assert authenticate(s, newer) is not None


def test_a_new_token_keeps_the_group_unless_another_is_named(store: Store) -> None:
    with store.session() as s:
        add_user(s, "ann", "physics", group_priority=2)
        kept = issue_token(s, "ann", new_token=True)
        assert (kept.group, kept.moved_from) == ("physics", None)
        moved = issue_token(s, "ann", "chem", new_token=True)
        assert (moved.group, moved.moved_from) == ("chem", "physics")
    with store.session() as s:
        assert authenticate(s, kept.token) is None
        ann = authenticate(s, moved.token)
        assert ann is not None
        assert ann.group == "chem"
        with pytest.raises(UserError, match=r"^--group: needed to add a new user"):
            add_user(s, "zed")


def test_a_removed_user_s_token_stops_and_their_requests_stay(store: Store) -> None:
    rid = _request(store, "ann")
    with store.session() as s:
        root = add_user(s, "root", "admins", admin=True)
        token = add_user(s, "ann", new_token=True)
    with store.session() as s, pytest.raises(UserError) as refused_open:
        remove_user(s, "ann")  # one of her requests is still open: nothing changes
    assert str(refused_open.value) == (
        f"NAME: user 'ann' has a request not yet final ({rid}); cancel it first "
        "(datasched cancel ID, with an administrator's token), or give --cancel"
    )
    with store.session() as s:
        assert authenticate(s, token) is not None
        admin = authenticate(s, root)
        assert admin is not None
        req = ops.find_request(s, admin, rid)
        assert req is not None
        ops.cancel_request(s, req)
    with store.session() as s:
        gone = remove_user(s, "ann")
        assert (gone.name, gone.group, gone.requests) == ("ann", "g", 1)
    with store.session() as s:
        assert authenticate(s, token) is None
        assert [u.name for u in list_users(s)] == ["root"]
        assert [(r.name, r.requests) for r in removed_users(s)] == [("ann", 1)]
        assert [g.users for g in list_groups(s) if g.name == "g"] == [0]
        kept = ops.find_request(s, admin, rid)  # her history stays, under her name
        assert kept is not None
        assert (kept.owner.name, kept.state) == ("ann", "aborted")
        with pytest.raises(UserError, match=r"^NAME: user 'ann' was removed already$"):
            remove_user(s, "ann")
        with pytest.raises(UserError, match=r"^NAME: user 'ann' was removed \(users add"):
            set_user(s, "ann", admin=True)
        with pytest.raises(UserError, match=r"^NAME: user 'ann' was removed \(their requests"):
            add_user(s, "ann", "g")  # her name is not someone else's
    with store.session() as s:  # --new-token brings the same user back, not an administrator
        back = issue_token(s, "ann", new_token=True)
        assert (back.group, back.restored) == ("g", True)
    with store.session() as s:
        ann = authenticate(s, back.token)
        assert ann is not None
        assert not ann.admin
        assert ops.find_request(s, ann, rid) is not None


def test_remove_cancelling_revokes_cancels_and_removes_in_one_transaction(
    store: Store,
) -> None:
    """`users remove NAME --cancel`'s operation: the token refused, every open request
    aborted (the jobs the runner held named, for the daemon to cancel there), the user
    removed; for the last administrator, nothing changes at all."""
    rid, job_id = one_running_job(store)
    waiting = _request(store, "ann")
    with store.session() as s:
        root = add_user(s, "root", "admins", admin=True)
        token = add_user(s, "ann", new_token=True)
    with store.session() as s:
        removal = ops.remove_user_cancelling(s, "ann")
    assert set(removal.cancelled) == {rid, waiting}
    assert removal.handed == (job_id,)  # running: the runner holds it
    assert (removal.removed.name, removal.removed.requests) == ("ann", 2)
    with store.session() as s:
        assert authenticate(s, token) is None
        admin = authenticate(s, root)
        assert admin is not None
        for r in (rid, waiting):
            req = ops.find_request(s, admin, r)
            assert req is not None
            assert req.state == "aborted"
            assert {j.state for j in req.jobs} == {"aborted"}
            assert ops.open_requests(s, req.owner_id) == 0
    with store.session() as s:
        admin = authenticate(s, root)
    mine = _request(store, "root", caller=admin)
    with store.session() as s, pytest.raises(UserError, match="'root' is the last admin"):
        ops.remove_user_cancelling(s, "root")
    with store.session() as s:  # refused: the token works, the request still open
        admin = authenticate(s, root)
        assert admin is not None
        req = ops.find_request(s, admin, mine)
        assert req is not None
        assert req.state == "pending"


def test_the_last_administrator_is_never_removed_or_demoted(store: Store) -> None:
    with store.session() as s:
        add_user(s, "root", "admins", admin=True)
        add_user(s, "bob", "physics")
    for change, field in (
        (lambda s: remove_user(s, "root"), "NAME"),
        (lambda s: set_user(s, "root", admin=False), "--no-admin"),
    ):
        with store.session() as s, pytest.raises(UserError) as refused:
            change(s)
        assert str(refused.value) == (
            f"{field}: 'root' is the last administrator; make another one first "
            "(datasched users set NAME --admin)"
        )
    with store.session() as s:
        promoted = set_user(s, "bob", admin=True, group="admins")
        assert (promoted.admin, promoted.was_admin) == (True, False)
        assert (promoted.group, promoted.was_group) == ("admins", "physics")
        set_user(s, "root", admin=False)  # bob is one now
    with store.session() as s:
        assert [u.name for u in list_users(s) if u.admin] == ["bob"]
        with pytest.raises(UserError, match="'bob' is the last administrator"):
            set_user(s, "bob", admin=False)
        with pytest.raises(UserError, match="'bob' is the last administrator"):
            remove_user(s, "bob")
        remove_user(s, "root")  # no longer an administrator: removed
        with pytest.raises(UserError, match=r"^NAME: no user 'nobody'$"):
            remove_user(s, "nobody")
        with pytest.raises(UserError, match=r"^NAME: no user 'nobody'$"):
            set_user(s, "nobody", admin=True)
        with pytest.raises(UserError, match=r"^--admin, --no-admin, --group: give one$"):
            set_user(s, "bob")


def test_two_administrators_demoting_each_other_at_once_leave_one(store: Store) -> None:
    """Each demotion locks the administrators' rows before it counts them: the second waits
    for the first to commit, then finds itself the last (without the lock, PostgreSQL's
    transactions each counted two, and both went through)."""
    with store.session() as s:
        add_user(s, "a", "admins", admin=True)
        add_user(s, "b", "admins", admin=True)
    changed, release = threading.Event(), threading.Event()
    refused: list[str] = []

    def demote(name: str, hold: bool) -> None:
        try:
            with store.session() as s:
                set_user(s, name, admin=False)
                if hold:  # the first keeps its transaction open until released
                    changed.set()
                    release.wait(timeout=30)
        except UserError as exc:
            refused.append(str(exc))

    first = threading.Thread(target=demote, args=("a", True))
    first.start()
    assert changed.wait(timeout=30)
    second = threading.Thread(target=demote, args=("b", False))
    second.start()
    second.join(timeout=1)  # with the lock it waits on the first; either way, go on
    release.set()
    first.join(timeout=30)
    second.join(timeout=30)
    assert refused == [
        "--no-admin: 'b' is the last administrator; make another one first "
        "(datasched users set NAME --admin)"
    ]
    with store.reading() as s:
        assert [u.name for u in list_users(s) if u.admin] == ["b"]


def test_bad_user_names_are_refused(store: Store) -> None:
    with store.session() as s, pytest.raises(UserError, match="NAME"):
        add_user(s, "a b", "g")


def _request(
    store: Store, owner: str, n_jobs: int = 2, events: int = 25, caller: Caller | None = None
) -> str:
    with store.session() as s:
        if caller is None:
            caller = authenticate(s, add_user(s, owner, "g", new_token=True))
        assert caller is not None
        work = ProcessorWork("proc.py:P")
        rid = ops.new_request_id()
        jobs = [
            ElementaryJob(rid, i, (FileRef(f"/d/{owner}{i}.root", events, 1000),), work)
            for i in range(n_jobs)
        ]
        mjr = MetaJobRequest(owner, work, (), title="t")
        ops.store_accepted(s, caller, rid, "raw", "application/yaml", mjr, jobs)
        return rid


def test_owners_see_their_requests_and_admins_all(store: Store) -> None:
    with store.session() as s:
        add_user(s, "root", "admins", admin=True)
    rid = _request(store, "ann")
    _request(store, "bob")
    with store.session() as s:
        users = {u.name: u for u in list_users(s)}
        assert ops.find_request(s, users["ann"], rid) is not None
        assert ops.find_request(s, users["bob"], rid) is None
        assert ops.find_request(s, users["root"], rid) is not None
        assert len(ops.list_requests(s, users["ann"])) == 1
        assert len(ops.list_requests(s, users["root"])) == 2


def test_a_refused_request_is_kept_with_its_errors(store: Store) -> None:
    with store.session() as s:
        add_user(s, "ann", "g")
        ann = list_users(s)[0]
        req = refused.store_refused(s, ann, "<x/>", "application/xml", [FieldError("a.b", "bad")])
        rid = req.id
    with store.session() as s:
        req2 = ops.find_request(s, ann, rid)
        assert req2 is not None
        assert req2.state == "refused"
        assert req2.errors == [{"field": "a.b", "reason": "bad"}]


def test_a_replayed_packet_is_stored_once_and_states_follow_the_jobs(store: Store) -> None:
    rid = _request(store, "ann", n_jobs=2)
    listener = StoreListener(store)
    packet = PacketDone(f"{rid}.0", "/d/ann0.root", 0, 10, "n1", 100, 0.5, pickle.dumps(1))
    listener.job_state(f"{rid}.0", JobState.RUNNING, node="n1")
    listener.packet_done(packet)
    listener.packet_done(packet)
    assert listener.replays == 1
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(Packet)) == 1
        assert ops.done_ranges(s, f"{rid}.0") == [("/d/ann0.root", 0, 10)]
        assert ops.progress(s, [f"{rid}.0"])[f"{rid}.0"]["events"] == 10
        assert ops.find_request(s, list_users(s)[0], rid).state == "running"  # type: ignore[union-attr]
    listener.job_state(f"{rid}.0", JobState.COMPLETED)
    listener.job_state(f"{rid}.1", JobState.FAILED, log="boom", failed_file="/d/ann1.root")
    with store.session() as s:
        req = ops.find_request(s, list_users(s)[0], rid)
        assert req is not None
        assert req.state == "failed"
        assert req.jobs[1].failed_file == "/d/ann1.root"
        assert req.jobs[1].log == "boom"
    # A final job keeps its state whatever comes late.
    listener.job_state(f"{rid}.0", JobState.RUNNING)
    with store.session() as s:
        req = ops.find_request(s, list_users(s)[0], rid)
        assert req is not None
        assert req.jobs[0].state == "completed"


def test_cancel_aborts_unfinished_jobs_and_names_those_the_runner_holds(store: Store) -> None:
    rid = _request(store, "ann", n_jobs=3)
    listener = StoreListener(store)
    listener.job_state(f"{rid}.0", JobState.COMPLETED)
    listener.job_state(f"{rid}.1", JobState.RUNNING)
    with store.session() as s:
        req = ops.find_request(s, list_users(s)[0], rid)
        assert req is not None
        assert ops.cancel_request(s, req) == [f"{rid}.1"]
    with store.session() as s:
        req = ops.find_request(s, list_users(s)[0], rid)
        assert req is not None
        assert req.state == "aborted"
        assert [j.state for j in req.jobs] == ["completed", "aborted", "aborted"]
        assert ops.pending_jobs(s) == []


def test_jobs_held_by_the_runner_are_requeued_with_their_files_and_work(store: Store) -> None:
    rid = _request(store, "ann", n_jobs=2)
    listener = StoreListener(store)
    listener.job_state(f"{rid}.0", JobState.RUNNING)
    listener.job_state(f"{rid}.1", JobState.COMPLETED)
    with store.session() as s:
        assert ops.requeue_unfinished(s) == 1
    with store.session() as s:
        (job,) = ops.pending_jobs(s)
        ej = ops.elementary_job(job)
    assert ej.id == f"{rid}.0"
    assert ej.user == "ann"
    assert ej.group == "g"
    assert ej.files == (FileRef("/d/ann0.root", 25, 1000),)
    assert ej.work == ProcessorWork("proc.py:P")


def test_pending_jobs_come_by_group_priority_then_age(store: Store) -> None:
    old = _request(store, "ann", n_jobs=2)
    new = _request(store, "bob", n_jobs=1)
    with store.session() as s:
        assert [j.id for j in ops.pending_jobs(s)] == [f"{old}.0", f"{old}.1", f"{new}.0"]
        add_user(s, "bob", "urgent", new_token=True, group_priority=5.0)
    with store.session() as s:
        assert [j.id for j in ops.pending_jobs(s)] == [f"{new}.0", f"{old}.0", f"{old}.1"]
        assert ops.elementary_job(ops.pending_jobs(s)[0]).priority == 5.0


def test_jobs_ending_at_once_leave_their_request_completed(store: Store) -> None:
    """Each report is a transaction of its own: without locking the request, two jobs
    completing at once each see the other still running (PostgreSQL's read committed)."""
    import threading

    listener = StoreListener(store)
    for _ in range(3):
        rid = _request(store, "ann", n_jobs=6)
        barrier = threading.Barrier(6)

        def complete(i: int, rid: str = rid, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            listener.job_state(f"{rid}.{i}", JobState.COMPLETED)

        threads = [threading.Thread(target=complete, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with store.reading() as s:
            req = ops.find_request(s, list_users(s)[0], rid)
            assert req is not None
            assert req.state == "completed"


def test_a_job_s_node_is_where_its_packets_ran_not_the_split_s_preference(
    sqlite_store: Store,
) -> None:
    from datasched.service.store.models import Job

    with sqlite_store.session() as s:
        caller = authenticate(s, add_user(s, "ann", "g"))
        assert caller is not None
        work = ProcessorWork("p.py:P")
        files = (FileRef("/d/a.root", 30, 300),)
        ops.store_accepted(
            s, caller, "r1", "raw", "application/yaml", MetaJobRequest("ann", work, ()),
            [ElementaryJob("r1", 0, files, work, node="w1")],
        )  # fmt: skip
        job = s.get(Job, "r1.0")
        assert job is not None
        assert ops.job_node(job, ops.packet_nodes(s, ["r1.0"])["r1.0"]) == (None, "w1")
    listener = StoreListener(sqlite_store)
    listener.job_state("r1.0", JobState.RUNNING, node="w2")
    for a, node in ((0, "w2"), (10, "w3"), (20, "w3")):
        listener.packet_done(PacketDone("r1.0", "/d/a.root", a, a + 10, node, 100, 0.1, None))
    with sqlite_store.session() as s:
        job = s.get(Job, "r1.0")
        assert job is not None
        ran_on = ops.packet_nodes(s, ["r1.0"])["r1.0"]
        assert ran_on == {"w2": 10, "w3": 20}
        assert ops.job_node(job, ran_on) == ("w3", None)  # most events; no preference now
        assert ops.job_node(job, {}) == ("w2", None)  # running, no packet yet: as reported
