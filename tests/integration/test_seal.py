"""The seal of the event log (docs/operations.md, "The seal"): checkpoints of a signed hash chain over every
final event and the decisions they closed. An untouched log verifies; an event changed, removed or added,
or a decision changed, directly in PostgreSQL, fails verification naming the first bad seq; sealing never
passes the horizon, never seals twice beside itself, and a sweep killed mid-seal leaves no gap. Each test
has a database of its own: the chain covers the whole log."""

from __future__ import annotations

import itertools
import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import select, text

from beat.sweep import run_sweep
from models import store
from models.record_tables import Seal
from models.seal_reads import verify_live
from models.sealing import Verdict
from models.store.seals import seal_next
from models.tables import Event
from parkway.crypto import seal_public_key
from parkway.db import transaction
from tasks.sdk import answer
from tests.integration.helpers import parked, while_held
from tests.support import HUMAN, ROOT, child_env, new_response_id


def decided(n: int) -> list[str]:
    """``n`` runs whose one question ana answered (each wait closed by an event); their interaction ids."""
    ids = []
    for _ in range(n):
        _, asked = parked("t.ask_one")
        answer(asked["go"].id, "yes", response_id=new_response_id(), principal=HUMAN)
        ids.append(asked["go"].id)
    return ids


def seal_everything(batch: int = 1000) -> list[Seal]:
    """Seal until no final event is left unsealed; the chain, in order."""
    while True:
        with transaction() as session:
            if seal_next(session, batch=batch) is None:
                break
    return chain()


def chain() -> list[Seal]:
    with transaction() as session:
        seals = list(session.scalars(select(Seal).order_by(Seal.position)))
        session.expunge_all()
        return seals


def all_seqs() -> list[int]:
    with transaction() as session:
        return list(session.scalars(select(Event.seq).order_by(Event.seq)))


def verify() -> Verdict:
    return verify_live(since=None, until=None, public_key=seal_public_key())


def sql(statement: str, **params: Any) -> None:
    with transaction() as session:
        session.execute(text(statement), params)


def closing_seq(interaction_id: str) -> int:
    with transaction() as session:
        return int(
            session.execute(
                text("SELECT seq FROM events WHERE type = 'interaction.answered' AND data->>'interaction_id' = :i"),
                {"i": interaction_id},
            ).scalar_one()
        )


def test_seal__an_untouched_log_verifies_and_every_final_event_is_sealed_once(actors_db: str) -> None:
    # Given decided waits, sealed by sweep passes of 4 events a checkpoint
    decided(3)
    while run_sweep(batch=4).counts["sealed"]:
        pass
    # Then the checkpoints follow one another with no gap, each event in exactly one of them
    seals = chain()
    assert [s.position for s in seals] == list(range(len(seals))) and len(seals) > 1
    assert all(s.after_seq == p.last_seq for p, s in itertools.pairwise(seals))
    assert [e[0] for s in seals for e in s.entries] == all_seqs()
    # And the log verifies, each decision counted
    verdict = verify()
    assert verdict.ok, verdict.as_dict()
    assert (verdict.checkpoints, verdict.events, verdict.decisions) == (len(seals), len(all_seqs()), 3)


@pytest.mark.parametrize(
    "tamper",
    ["change an event's data", "remove an event", "add an event", "change a decision", "change who decided"],
)
def test_seal__a_change_in_postgresql_after_sealing_fails_verification_at_its_seq(actors_db: str, tamper: str) -> None:
    # Given decided waits, sealed
    ids = decided(3)
    seal_everything()
    seqs = all_seqs()
    victim = closing_seq(ids[1])
    # When someone with the database's password edits the log or a decision directly
    if tamper == "change an event's data":
        sql("UPDATE events SET data = CAST(:d AS json) WHERE seq = :s", d='{"answered_by": "eve"}', s=victim)
    elif tamper == "remove an event":
        sql("DELETE FROM events WHERE seq = :s", s=victim)
    elif tamper == "add an event":
        victim = next(a + 1 for a, b in itertools.pairwise(seqs) if b - a > 1)
        sql("INSERT INTO events (seq, run_id, type, at, data) SELECT :s, run_id, 'interaction.answered', at, data"
            " FROM events WHERE seq = :o", s=victim, o=seqs[0])  # fmt: skip
    elif tamper == "change a decision":
        sql("UPDATE interactions SET value = CAST('\"no\"' AS json) WHERE id = :i", i=ids[1])
    else:
        sql("UPDATE interactions SET answered_by_id = (SELECT id FROM principals WHERE name = 'eve') WHERE id = :i",
            i=ids[1])  # fmt: skip
    # Then verification fails, naming that seq first
    verdict = verify()
    assert not verdict.ok and verdict.finding is not None
    assert verdict.finding.seq == victim, verdict.as_dict()


def test_seal__a_changed_checkpoint_or_a_missing_one_fails_verification(actors_db: str) -> None:
    decided(3)
    seals = seal_everything(batch=3)
    assert len(seals) >= 3
    # A checkpoint's hash rewritten: its signature no longer holds
    sql("UPDATE seals SET hash = :h WHERE position = 1", h="f" * 64)
    assert "not signed" in problem()
    sql("UPDATE seals SET hash = :h WHERE position = 1", h=seals[1].hash)
    assert verify().ok
    # A checkpoint removed: the next one follows none
    sql("DELETE FROM seals WHERE position = 1")
    assert "checkpoint 2 does not follow checkpoint 0" in problem()


def problem() -> str:
    verdict = verify()
    assert verdict.finding is not None, "verification passed"
    return verdict.finding.problem


def test_seal__never_past_the_horizon__a_lower_seq_still_to_commit_is_sealed_after_it_commits(
    actors_db: str,
) -> None:
    # Given a run, and a transaction that wrote an event and is still open
    ids = decided(1)
    run_id = _run_of(ids[0])
    seal_everything()

    def hold(session: Any) -> None:
        store.append_event(session, run_id, "test.early")

    def later_and_seal() -> list[int]:
        with transaction() as session:  # a later transaction: its event sorts above the open one's
            store.append_event(session, run_id, "test.late")
        with transaction() as session:
            sealed = seal_next(session, batch=100)
        return [e[0] for e in sealed.entries] if sealed else []

    # When a later event commits and a pass seals while the first transaction is open
    sealed_meanwhile = while_held(hold, later_and_seal)
    # Then nothing was sealed past the open transaction, and once it committed both are sealed, in order
    assert sealed_meanwhile == []
    seal_everything()
    assert [e[0] for s in chain() for e in s.entries] == all_seqs()
    assert verify().ok


def _run_of(interaction_id: str) -> str:
    with transaction() as session:
        return str(
            session.execute(text("SELECT run_id FROM interactions WHERE id = :i"), {"i": interaction_id}).scalar_one()
        )


def test_seal__two_passes_at_once_seal_the_next_checkpoint_once(actors_db: str) -> None:
    decided(2)
    outcomes: list[Any] = []

    def hold(session: Any) -> None:
        outcomes.append(seal_next(session, batch=1000))

    def second() -> Any:
        with transaction() as session:
            return seal_next(session, batch=1000)

    outcomes.append(while_held(hold, second))
    assert outcomes[0] is not None and outcomes[1] is None
    assert len(chain()) == 1 and verify().ok


def test_seal__a_sweep_killed_mid_seal__the_next_pass_resumes_no_gap_no_double_seal(actors_db: str) -> None:
    # Given decided waits, and a first checkpoint of 4 events sealed by a pass
    decided(3)
    sweep = [sys.executable, "-m", "parkway.cli", "sweep", "--once"]

    def pass_(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(sweep, cwd=ROOT, env=child_env(actors_db, PARKWAY_SWEEP_BATCH="4", **env),
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    assert run_sweep(batch=4).counts["sealed"] == 4
    assert len(chain()) == 1
    # When the next pass, a process of its own, is killed with its checkpoint written, not committed
    killed = pass_(PARKWAY_CRASH_AT="seal.mid_batch")
    assert killed.returncode == 137, killed.stderr
    assert "crash point seal.mid_batch reached" in killed.stderr
    assert len(chain()) == 1
    # Then later passes (here, in this process) resume from the head: every event sealed once, no gap, and
    # the log verifies
    while len(chain()) < 99 and sum(len(s.entries) for s in chain()) < len(all_seqs()):
        run_sweep(batch=4)
    seals = chain()
    assert [s.position for s in seals] == list(range(len(seals)))
    assert all(s.after_seq == p.last_seq for p, s in itertools.pairwise(seals))
    assert [e[0] for s in seals for e in s.entries] == all_seqs()
    assert verify().ok
