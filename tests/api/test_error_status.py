"""HTTP statuses are the API's: the kernel's outcomes carry a wire code and state, api/errors.py the status."""

from __future__ import annotations

import pytest

from api.errors import outcome_status
from parkway import errors


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (errors.Unauthenticated("x"), 401, "unauthorized"),
        (errors.Forbidden("x"), 403, "forbidden"),
        (errors.WrongKind("x", name="bot", kind="agent", kinds=("human",)), 403, "forbidden"),
        (errors.NotFound("x"), 404, "not_found"),
        (errors.Conflict("x"), 409, "conflict"),
        (errors.Gone("x"), 410, "gone"),
        (errors.InvalidAnswer("x"), 422, "invalid_answer"),
    ],
)
def test_outcome_status__each_kernel_outcome_has_its_http_status(
    exc: errors.OutcomeError, status: int, code: str
) -> None:
    assert (outcome_status(exc), exc.code) == (status, code)


def test_kernel_exceptions__carry_no_http_status() -> None:
    kernel = [cls for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.ParkwayError)]
    assert errors.Conflict in kernel
    assert [cls.__name__ for cls in kernel if hasattr(cls, "status_code")] == []
