"""OpenTelemetry spans of a decision (docs/operations.md "Tracing"), set up only by the standard ``OTEL_*``
variables: with no ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_TRACES_EXPORTER=none``) nothing is set up, the
SDK is never imported, and every function here returns at its first line.

A wait never holds a span open: the park's span ends with its commit, and its context (a W3C ``traceparent``)
is stored on the wait's row; whatever resumes it later, in any process, starts its own span that **links** to
it (``PARKWAY_TRACE_WAITS=link``, the default: a new trace per resume) or is its child (``parent``).
Attributes name ids, names and outcomes only, never a value a person or a tool gave.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

# "on": set up in this process. A forked child starts off (the at-fork hook below), so every call here checks
# one flag, never the process id: what tracing costs a process that is not traced is that read.
_state: dict[str, Any] = {"pid": None, "on": False, "tracer": None, "provider": None, "parent": False}
KINDS = {"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER, "consumer": SpanKind.CONSUMER,
         "producer": SpanKind.PRODUCER, "client": SpanKind.CLIENT}  # fmt: skip
_NEW_TRACE = trace.set_span_in_context(trace.INVALID_SPAN)


def _forked() -> None:
    """A forked child (a Celery pool process) sets up its own SDK, or stays untraced."""
    _state.update(on=False, tracer=None, provider=None)


os.register_at_fork(after_in_child=_forked)


def wanted() -> bool:
    """Whether the ``OTEL_*`` variables ask for traces exported over OTLP."""
    env = os.environ
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    exporter = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    return bool(endpoint) and exporter != "none" and not disabled


def setup(service: str) -> bool:
    """Set up the SDK with a batching OTLP/HTTP exporter, once per process (a forked Celery child sets up its
    own: ``worker_process_init``); ``service`` is the name when ``OTEL_SERVICE_NAME`` does not give one.
    ``False`` (and nothing imported) when tracing is not asked for, or the ``otel`` extra is not installed."""
    if not wanted():
        return False
    if _state["pid"] == os.getpid():  # tried once in this process
        return bool(_state["on"])
    _state["pid"] = os.getpid()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:  # the product without its otel extra: say so once, run untraced
        import logging

        logging.getLogger("parkway.tracing").warning("OTEL_* set but the otel extra is not installed: no traces")
        return False
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service})
    provider = TracerProvider(resource=_hashed_once(resource))  # the sampler from OTEL_TRACES_SAMPLER(_ARG)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _state.update(on=True, tracer=provider.get_tracer("parkway"), provider=provider, parent=follows_wait())
    return True


def _hashed_once(resource: Any) -> Any:
    """The process's resource, its hash computed once: the OTLP encoder groups each exported span by its
    resource, and the SDK's ``Resource`` serialises its attributes to JSON for every hash (bench/RESULTS.md).
    A resource is immutable, so the hash it had is the hash it keeps; equal to the SDK's, as is equality."""

    class Hashed(type(resource)):  # type: ignore[misc]
        def __hash__(self) -> int:
            return hashed

    hashed = hash(resource)
    return Hashed(resource.attributes, resource.schema_url)


def on() -> bool:
    return bool(_state["on"])


def flush() -> None:
    """Export what is batched (a process about to exit, tests)."""
    if on():
        _state["provider"].force_flush()


def links(*traceparents: str | None) -> list[Link]:
    """Links to the spans these stored contexts name (``None`` and malformed ones left out)."""
    return [Link(found) for found in map(span_context, traceparents) if found is not None]


def span_context(traceparent: str | None) -> SpanContext | None:
    """The span a W3C ``traceparent`` (version 00, as ``traceparent()`` writes it) names; ``None`` if it is not one."""
    parts = traceparent.split("-") if traceparent else ()
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16 or len(parts[3]) != 2:
        return None
    try:
        trace_int, span_int, flags = (int(part, 16) for part in parts[1:])
        found = SpanContext(trace_int, span_int, is_remote=True, trace_flags=TraceFlags(flags))
    except ValueError:
        return None
    return found if found.is_valid else None


def publisher(traceparent: str | None) -> tuple[str | None, ...]:
    """What a delivery follows of the span that published it (a message header): its parent under
    ``PARKWAY_TRACE_WAITS=parent``; nothing else (the claim links what made the work due, the stored way)."""
    return (traceparent,) if _state["parent"] and _state["on"] else ()


def follows_wait() -> bool:
    """``PARKWAY_TRACE_WAITS=parent``: a resume is the child of what it follows, not a new linked trace (read
    once, as tracing is set up, from the settings, which refused any other value than ``link`` at start)."""
    from parkway.settings import get_settings  # as tracing is set up, never as this module loads

    return get_settings().trace_waits == "parent"


def span(
    name: str,
    *,
    kind: str = "internal",
    follows: Iterable[str | None] = (),
    root: bool = False,
    **attributes: Any,
) -> AbstractContextManager[Any]:
    """A span around the block, current inside it; ``None`` when tracing is off. ``follows``: stored
    contexts it links to (the first is its parent under ``PARKWAY_TRACE_WAITS=parent``); ``root``: a new
    trace (a resume, a sweep's re-drive) rather than a child of the current span. An exception ends it
    with an error status naming its type."""
    return _Span(name, kind, follows, root, attributes) if _state["on"] else _OFF


_OFF = nullcontext()  # what a span is when tracing is off: one object for every call, entered as None


class _Span:
    """``span`` when tracing is on: started as the block is entered, ended as it is left."""

    __slots__ = ("attributes", "follows", "kind", "name", "root", "started", "tokens")

    def __init__(self, name: str, kind: str, follows: Iterable[str | None], root: bool, attributes: dict[str, Any]):
        self.name, self.kind, self.follows, self.root, self.attributes = name, kind, follows, root, attributes

    def __enter__(self) -> Any:
        stored = [tp for tp in self.follows if tp] if self.follows else ()
        parent = span_context(stored.pop(0)) if self.root and stored and _state["parent"] else None  # not a link too
        context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent else _NEW_TRACE if self.root else None
        named = {f"parkway.{k}": v for k, v in self.attributes.items() if v is not None}
        started = self.started = _state["tracer"].start_span(
            self.name, context=context, kind=KINDS[self.kind], links=links(*stored) if stored else (),
            attributes=named, record_exception=False, set_status_on_exception=False)  # fmt: skip
        within = None if self.root else _CURRENT.get()  # a child in Parkway's span: its trace id's text is the same
        self.tokens = otel_context.attach(trace.set_span_in_context(started)), _CURRENT.set(Current.of(started, within))
        return started

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        started, (token, mine) = self.started, self.tokens
        if isinstance(exc, Exception):  # its type only: an exception's text may quote a value
            started.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        _CURRENT.reset(mine)
        otel_context.detach(token)
        started.end()


class Current:
    """A span with its ids in hex, formatted once: what every statement, event and log line in it reads (set
    once, never changed: a plain class, as a frozen dataclass sets each field through ``object.__setattr__``)."""

    __slots__ = ("span", "span_id", "trace_id", "trace_int", "traceparent")

    def __init__(self, span: Any, trace_int: int, trace_id: str, span_id: str, traceparent: str) -> None:
        self.span, self.trace_int, self.trace_id = span, trace_int, trace_id
        self.span_id, self.traceparent = span_id, traceparent

    @staticmethod
    def of(found: Any, within: Current | None = None) -> Current | None:
        """``found``'s ids; ``within``: the span it may be a child of, whose trace id's text it reuses."""
        context = found.get_span_context()
        if not context.is_valid:
            return None
        trace_int = context.trace_id
        trace_hex = within.trace_id if within is not None and within.trace_int == trace_int else f"{trace_int:032x}"
        span_hex = f"{context.span_id:016x}"
        return Current(found, trace_int, trace_hex, span_hex, f"00-{trace_hex}-{span_hex}-{context.trace_flags:02x}")


# Parkway's innermost span, as ``span`` began it (one context variable read, where OpenTelemetry's current span
# is three calls deep).
_CURRENT: ContextVar[Current | None] = ContextVar("parkway_span", default=None)


def current() -> Current | None:
    """The current span: Parkway's own, else whatever another instrumentation made current (the API's HTTP
    span); ``None`` when tracing is off or there is none."""
    if not _state["on"]:
        return None
    return _CURRENT.get() or Current.of(trace.get_current_span())


def follow(*traceparents: str | None) -> None:
    """Links added to the current span once what it follows is read (a claim reads the stored contexts)."""
    found = current() if any(traceparents) else None
    if found is not None:
        parent = getattr(found.span, "parent", None)  # linked once: a parent under PARKWAY_TRACE_WAITS=parent
        for link in links(*dict.fromkeys(traceparents)):
            if parent is None or link.context.span_id != parent.span_id:
                found.span.add_link(link.context)


def annotate(**attributes: Any) -> None:
    """Attributes added to the current span (an outcome known at its end), in one call."""
    found = current()
    if found is not None:
        found.span.set_attributes({f"parkway.{k}": v for k, v in attributes.items() if v is not None})


def failed(why: str) -> None:
    """The current span's status set to an error, with a sentence (never a value)."""
    found = current()
    if found is not None:
        found.span.set_status(Status(StatusCode.ERROR, why))


def traceparent() -> str | None:
    """The current span's context as a W3C ``traceparent`` (stored on a wait, sent to a remote worker)."""
    found = current()
    return found.traceparent if found else None


def ids() -> tuple[str, str] | None:
    """The current span's (trace id, span id) in hex, for events and log lines; ``None`` outside one."""
    found = current()
    return (found.trace_id, found.span_id) if found else None


def trace_id() -> str | None:
    found = current()
    return found.trace_id if found else None
