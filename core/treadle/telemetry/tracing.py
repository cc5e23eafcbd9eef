"""Spans across the hops of a run.

A run's trace starts with a short `run {agent}` span when the run row is created; its W3C context
is stored on the run (`runs.trace_context`) and read back by every lease, so each step's span —
on whichever worker, process or Lambda claims the step — is a child of it: one trace per run.
A step message also carries the context of the span that sent it (SQS message attributes); the
step span links to that sender. A sub-agent's run starts a trace of its own, linked to the
parent's span.

Off unless a shape installs an SDK tracer provider: the API's no-op spans cost next to nothing
and their context is invalid, so nothing is stored or sent then.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from treadle.telemetry.logs import log_fields

TRACER_NAME = "treadle"
_propagator = TraceContextTextMapPropagator()
_provider: trace.TracerProvider | None = None
_tracer: trace.Tracer | None = None

#: the block of a model or tool call while tracing is off: the API's invalid span, no span built
#: and no generator run (a step makes one of each per iteration; nullcontext is reusable)
_NOT_RECORDING: AbstractContextManager[Span] = nullcontext(trace.INVALID_SPAN)

#: attribute values a span may hold (never content)
AttrValue = str | int | float | bool


def use_tracer_provider(provider: trace.TracerProvider | None) -> None:
    """Use `provider` instead of the process-global one (tests, benchmarks); None: the global."""
    global _provider, _tracer
    _provider, _tracer = provider, None


def tracer() -> trace.Tracer:
    """The tracer (cached: the global provider's is a proxy that follows a later installed SDK)."""
    global _tracer
    if _tracer is None:
        _tracer = (_provider or trace.get_tracer_provider()).get_tracer(TRACER_NAME)
    return _tracer


def _recording() -> bool:
    """Whether spans go anywhere: a provider was handed to `use_tracer_provider`, or an SDK (or
    any provider but the API's proxy) is installed globally — the proxy's spans are no-ops."""
    return _provider is not None or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def current_carrier() -> dict[str, str]:
    """The current span's context as W3C headers (`traceparent`, `tracestate`); {} when no
    recording span is current (tracing off)."""
    carrier: dict[str, str] = {}
    if trace.get_current_span().get_span_context().is_valid:
        _propagator.inject(carrier)
    return carrier


def context_from(carrier: Mapping[str, str] | None) -> otel_context.Context | None:
    """The remote span context in `carrier`, as a parent context; None when there is none."""
    if not carrier:
        return None
    ctx = _propagator.extract(dict(carrier))
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


@contextmanager
def attached(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Make the context in `carrier` current (a worker receiving a message that carries one)."""
    ctx = context_from(carrier)
    if ctx is None:
        yield
        return
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def _set_error(span: Span, exc: BaseException) -> None:
    # the exception's type only: a message may quote content
    span.set_attribute("error.type", type(exc).__name__)
    span.set_status(Status(StatusCode.ERROR))


@contextmanager
def span(
    name: str,
    attributes: Mapping[str, AttrValue | None],
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    parent: otel_context.Context | None = None,
    links: list[Link] | None = None,
) -> Iterator[Span]:
    """A span current for the block; an escaping exception marks it failed with `error.type`
    (no message, no stack trace: both may quote content). Tracing off, the block runs under the
    API's invalid span without building one (what the no-op tracer would do, minus its cost)."""
    if not _recording():
        yield trace.INVALID_SPAN
        return
    attrs = {k: v for k, v in attributes.items() if v is not None}
    with tracer().start_as_current_span(
        name, context=parent, kind=kind, attributes=attrs, links=links,
        record_exception=False, set_status_on_exception=False,
    ) as sp:
        try:
            yield sp
        except BaseException as exc:
            _set_error(sp, exc)
            raise


def run_created(
    *, run_id: str, tenant_id: str, agent: str, parent_run_id: str | None, depth: int
) -> dict[str, str]:
    """Record the `invoke_agent {agent}` span of a run being created (the GenAI conventions' agent
    span: `gen_ai.operation.name=invoke_agent`, `gen_ai.agent.name`, `gen_ai.agent.id` = the run
    id); returns its context to store on the run row ({} when tracing is off). The span is the
    root every step of the run hangs under. A sub-agent's run is a new trace, linked to the span
    that started it (the parent's Agent call)."""
    caller = trace.get_current_span().get_span_context()
    child = parent_run_id is not None
    links = [Link(caller)] if child and caller.is_valid else None
    attrs: dict[str, AttrValue | None] = {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, "gen_ai.agent.id": run_id,
        "treadle.run.id": run_id, "treadle.tenant": tenant_id, "treadle.agent": agent,
        "treadle.run.parent_id": parent_run_id, "treadle.run.depth": depth,
    }
    with span(f"invoke_agent {agent}", attrs, parent=otel_context.Context() if child else None, links=links):
        return current_carrier()


@contextmanager
def step(
    *, run_id: str, step_no: int, tenant_id: str, agent: str, run_context: Mapping[str, str] | None,
    worker: str | None = None,
) -> Iterator[Span]:
    """A step's span: a child of its run's span (stored on the run row), linked to the span
    that sent the step message when one is current (the SQS worker attaches it). The log
    records of the block carry the run id, step and tenant."""
    if not _recording():
        with log_fields(run_id=run_id, step_no=step_no, tenant=tenant_id):
            yield trace.INVALID_SPAN
        return
    sender = trace.get_current_span().get_span_context()
    parent = context_from(run_context)
    links = [Link(sender)] if sender.is_valid and parent is not None else None
    attrs: dict[str, AttrValue | None] = {
        "treadle.run.id": run_id, "treadle.step_no": step_no, "treadle.tenant": tenant_id,
        "treadle.agent": agent, "treadle.worker": worker,
    }
    with log_fields(run_id=run_id, step_no=step_no, tenant=tenant_id), \
            span(f"step {agent}", attrs, parent=parent, links=links) as sp:
        yield sp


def model_call(
    *, provider: str, model: str, iteration: int, attempt: int, fallback: bool
) -> AbstractContextManager[Span]:
    """One model request (GenAI semantic conventions: `chat {model}`, a CLIENT span)."""
    if not _recording():
        return _NOT_RECORDING
    attrs: dict[str, AttrValue | None] = {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider, "gen_ai.request.model": model,
        "treadle.iteration": iteration, "treadle.attempt": attempt, "treadle.fallback": fallback,
    }
    return span(f"chat {model}", attrs, kind=SpanKind.CLIENT)


def set_model_usage(sp: Span, *, response_model: str, input_tokens: int, output_tokens: int,
                    stop_reason: str | None) -> None:
    sp.set_attribute("gen_ai.response.model", response_model)
    sp.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    sp.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    if stop_reason:
        sp.set_attribute("gen_ai.response.finish_reasons", [stop_reason])


def tool_call(*, tool: str, call_id: str, effects: str, iteration: int) -> AbstractContextManager[Span]:
    """One tool call (GenAI `execute_tool {name}`); the tool's input and result stay out."""
    if not _recording():
        return _NOT_RECORDING
    attrs: dict[str, AttrValue | None] = {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id,
        "treadle.tool.effects": effects, "treadle.iteration": iteration,
    }
    return span(f"execute_tool {tool}", attrs)


def set_outcome(sp: Span, outcome: str) -> None:
    sp.set_attribute("treadle.outcome", outcome)
    if outcome == "error":
        sp.set_status(Status(StatusCode.ERROR))
