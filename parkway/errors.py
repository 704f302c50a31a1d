"""Parkway's exceptions: one root, each raised for one reason and carrying the ids involved."""

from __future__ import annotations

from typing import Any


class ParkwayError(Exception):
    """Root of every error Parkway raises on purpose."""


class ConfigError(ParkwayError):
    """Raised when the configuration cannot be used (missing or weak secret key, bad URL)."""


class SchemaMismatch(ParkwayError):
    """Raised when the database schema is not the revision this code needs (SPEC invariant 10)."""


class NotRegistered(ParkwayError):
    """Raised when a step or continuation name is not in the registry of this process."""


class WorkflowError(ParkwayError):
    """Raised when a step or continuation returns something Parkway cannot commit."""


class OutcomeError(ParkwayError):
    """Root of the answer/cancel outcomes other than success; carries the authoritative state. ``code`` is
    the stable error code a client reads (the API's ``error`` field); the HTTP status is the API's business
    (``api/errors.py``)."""

    code = "error"

    def __init__(self, detail: str, state: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.state = state


class NotFound(OutcomeError):
    """Raised when an id never existed (or the caller may not learn that it does)."""

    code = "not_found"


class Forbidden(OutcomeError):
    """Raised when the principal holds no current grant for what it asks."""

    code = "forbidden"


class ParkRefused(Forbidden):
    """Raised when a park addresses a target its run's owner holds no live grant on, or names as one who may
    answer a principal who is no live human or admin; nothing of it was stored."""


class Unauthenticated(OutcomeError):
    """Raised when no principal holds the token a caller presented."""

    code = "unauthorized"


class WrongKind(Forbidden):
    """Raised when the principal is not of a kind the call admits (an agent answering, say)."""

    def __init__(self, detail: str, *, name: str, kind: str, kinds: tuple[str, ...]) -> None:
        super().__init__(detail)
        self.name = name
        self.kind = kind
        self.kinds = kinds


class Conflict(OutcomeError):
    """Raised when another response won, or a retry reuses a response id with another value."""

    code = "conflict"


class Gone(OutcomeError):
    """Raised when the wait ended without an answer (expired, canceled, interrupted, run ended)."""

    code = "gone"


class InvalidAnswer(OutcomeError):
    """Raised when a value fails the interaction's JSON Schema; nothing was stored."""

    code = "invalid_answer"

    def __init__(self, detail: str, state: dict[str, Any] | None = None, errors: list[str] | None = None) -> None:
        super().__init__(detail, state)
        self.errors = errors or []


class LeaseLost(Conflict):
    """Raised when a remote lease no longer holds its work (its lease ran out, another lease took it, or it
    was completed with another outcome); nothing was committed."""

    code = "lease_lost"


class RunEnded(Gone):
    """Raised when a remote lease's run has ended: its work can no longer be committed."""

    code = "run_ended"


class InvalidOutcome(OutcomeError):
    """Raised when a remote worker's outcome cannot be committed as sent; nothing was committed and its lease
    is kept."""

    code = "invalid_outcome"


class InvalidDelegation(InvalidAnswer):
    """Raised when a delegation names oneself or a principal who could never answer; nothing was stored."""

    code = "invalid_delegation"


class InvalidPayload(OutcomeError):
    """Raised when a run's payload does not match what its first step declares (``@step(name, payload=...)``);
    nothing was stored. ``errors`` has a line per problem, ``problems`` each one's ``loc``, ``msg`` and
    ``type``; never a value."""

    code = "invalid_payload"

    def __init__(self, detail: str, *, errors: list[str], problems: list[dict[str, Any]]) -> None:
        super().__init__(detail)
        self.errors = errors
        self.problems = problems
