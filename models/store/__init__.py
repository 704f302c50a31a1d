"""The store: every state transition of Parkway, each a compare-and-set inside the caller's transaction.

Functions take the caller's session (or connection) and never commit; the caller owns the transaction
(``parkway.db.transaction``, or ``single_statement`` for a transition that is one statement). A transition
returns the changed row, or ``None``/``False`` (an outcome value) when it lost the race: losing a race is
a normal outcome. Only this package writes state; ``models.access`` is the read side for the API.

One module per entity; this module re-exports their public names (``from models import store;
store.answer(...)``).
"""

from models.jsonsafe import canonical_json, interaction_id
from models.outcome import InteractionSpec
from models.store.answering import AnswerReceipt, Expiry, expire_due
from models.store.claims import (
    Answer,
    Claim,
    Claimed,
    StepRef,
    claim,
    claim_in_one_statement,
    holds_live_claim,
    load_claim,
    release_claim,
    renew_lease,
)
from models.store.continuations import consume, consume_and_finish_run
from models.store.events import append_event, append_events, event_row
from models.store.interactions import (
    Act,
    CancelReceipt,
    authorize,
    cancel,
    cancel_digest,
    interaction_state,
)
from models.store.interrupts import Dead, give_up, give_up_exhausted, interrupt_run
from models.store.leases import (
    Leased,
    LeaseState,
    Receipt,
    continuation_of,
    lease,
    lease_state,
    outstanding_leases,
    receipt_of,
)
from models.store.outcomes import (
    Committed,
    Completion,
    Interruption,
    StepOutcome,
    commit_outcome,
)
from models.store.principals import (
    ANSWERERS,
    Actor,
    PrincipalRef,
    create_grant,
    create_principal,
    is_granted,
    mark_revocation_swept,
    principal_by_name,
    principal_ref_by_name,
    revoke_grant,
    unknown_principal,
)
from models.store.projections import (
    clear_projection_pending,
    clear_projections_pending,
    lock_run_for_projection,
    record_schedule_history,
)
from models.store.quorum import answer
from models.store.reviews import (
    interrupt_review,
    interrupt_stranded_reviews,
    record_review,
    review_progress,
    running_reviews,
    start_review,
    stranded_reviews,
)
from models.store.runs import Due, RunRecord, StepLike, create_run, erase_secrets, finish_run, set_title
from models.store.sql import Executor, new_id, skip_locked, word, words
from models.store.steps import next_step, park
from models.store.sweep import (
    ExpiredClaims,
    expirable_interactions,
    expired_claims,
    mark_for_republish,
    record_sweep,
    release_expired_claim,
    release_expired_claims,
)
from models.store.teams import Delegation, delegate, not_people
from models.store.timers import escalate_due, remind_due
from models.store.webhooks import (
    DeliveryLine,
    advance,
    claim_webhook,
    create_webhook,
    delete_webhook,
    due_webhooks,
    prune_deliveries,
    record_deliveries,
    record_failure,
    release,
    replay,
    rotate_secret,
    update_webhook,
)
from models.store.workers import Advert, Serving, WorkerView, advertise, live_workers, serving, withdraw

__all__ = [
    "ANSWERERS",
    "Act",
    "Actor",
    "Advert",
    "Answer",
    "AnswerReceipt",
    "CancelReceipt",
    "Claim",
    "Claimed",
    "Committed",
    "Completion",
    "Dead",
    "Delegation",
    "DeliveryLine",
    "Due",
    "Executor",
    "ExpiredClaims",
    "Expiry",
    "InteractionSpec",
    "Interruption",
    "LeaseState",
    "Leased",
    "PrincipalRef",
    "Receipt",
    "RunRecord",
    "Serving",
    "StepLike",
    "StepOutcome",
    "StepRef",
    "WorkerView",
    "advance",
    "advertise",
    "answer",
    "append_event",
    "append_events",
    "authorize",
    "cancel",
    "cancel_digest",
    "canonical_json",
    "claim",
    "claim_in_one_statement",
    "claim_webhook",
    "clear_projection_pending",
    "clear_projections_pending",
    "commit_outcome",
    "consume",
    "consume_and_finish_run",
    "continuation_of",
    "create_grant",
    "create_principal",
    "create_run",
    "create_webhook",
    "delegate",
    "delete_webhook",
    "due_webhooks",
    "erase_secrets",
    "escalate_due",
    "event_row",
    "expirable_interactions",
    "expire_due",
    "expired_claims",
    "finish_run",
    "give_up",
    "give_up_exhausted",
    "holds_live_claim",
    "interaction_id",
    "interaction_state",
    "interrupt_review",
    "interrupt_run",
    "interrupt_stranded_reviews",
    "is_granted",
    "lease",
    "lease_state",
    "live_workers",
    "load_claim",
    "lock_run_for_projection",
    "mark_for_republish",
    "mark_revocation_swept",
    "new_id",
    "next_step",
    "not_people",
    "outstanding_leases",
    "park",
    "principal_by_name",
    "principal_ref_by_name",
    "prune_deliveries",
    "receipt_of",
    "record_deliveries",
    "record_failure",
    "record_review",
    "record_schedule_history",
    "record_sweep",
    "release",
    "release_claim",
    "release_expired_claim",
    "release_expired_claims",
    "remind_due",
    "renew_lease",
    "replay",
    "review_progress",
    "revoke_grant",
    "rotate_secret",
    "running_reviews",
    "serving",
    "set_title",
    "skip_locked",
    "start_review",
    "stranded_reviews",
    "unknown_principal",
    "update_webhook",
    "withdraw",
    "word",
    "words",
]
