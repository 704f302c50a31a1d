"""Declarative base with a constraint naming convention, so Alembic migrations stay stable."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from sqlalchemy import BigInteger, CheckConstraint, DateTime, MetaData, String, TypeDecorator, column
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class UTCDateTime(TypeDecorator[datetime]):
    """``timestamptz``, read back in UTC (the driver returns it in the session's time zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


ID = String(64)
BigId = BigInteger()


def one_of(name: str, words: Iterable[str]) -> CheckConstraint:
    """The database refuses a value of column ``name`` that ``words`` (an enum) does not name: ck_<table>_<name>."""
    return CheckConstraint(column(name).in_([str(word) for word in words]), name=name)
