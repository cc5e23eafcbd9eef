"""A model call with its span (GenAI semantic conventions) and its metrics: provider, model,
attempt, fallback, duration, tokens, outcome. Never the prompt or the completion."""

from __future__ import annotations

import dataclasses
import time

from treadle.errors import ProviderError, RetryableProviderError
from treadle.providers.availability import note_call
from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, Provider
from treadle.providers.modelpattern import RESOLVER, is_pattern
from treadle.telemetry import tracing
from treadle.telemetry.metrics import metrics


async def observed_call(
    provider: Provider, provider_id: str, req: ModelRequest, on_delta: DeltaSink | None, *, fallback: bool
) -> ModelResponse:
    if is_pattern(req.model):  # loomcycle's model_pattern: the newest listed match (providers/modelpattern.py)
        req = dataclasses.replace(req, model=await RESOLVER.resolve(provider, provider_id, req.model))
    started = time.perf_counter()
    outcome = "error"
    usage = None
    try:
        with tracing.model_call(provider=provider_id, model=req.model, iteration=req.run.iteration if req.run else 0,
                                attempt=req.run.attempt if req.run else 0, fallback=fallback) as sp:
            try:
                response = await provider.call(req, on_delta)
            except ProviderError as exc:
                outcome = "retryable_error" if isinstance(exc, RetryableProviderError) else "error"
                sp.set_attribute("treadle.error.code", exc.code)
                if outcome == "retryable_error":
                    note_call(provider_id, req.model, exc.message)
                raise
            note_call(provider_id, req.model, None)
            usage = response.usage
            outcome = "ok"
            tracing.set_model_usage(sp, response_model=response.model or req.model,
                                    input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                                    stop_reason=response.stop_reason)
            return response
    finally:
        metrics().model_call(provider_id, req.model, outcome, time.perf_counter() - started,
                             usage.input_tokens if usage else 0, usage.output_tokens if usage else 0)
