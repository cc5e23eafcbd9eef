"""Every error treadle raises on purpose, with its stable code and HTTP status.

    TreadleError                       (500 internal_error)
    ├── ConfigError                    (500 config_error)      invalid treadle.yaml / env, names file + key path
    ├── BadRequest                     (400 bad_request)
    │   ├── UnknownAgent               (400 unknown_agent)
    │   ├── BadDeliveryId              (400 bad_delivery_id)   webhook delivery id header malformed
    │   ├── BadPayload                 (400 bad_payload)       webhook body is not the JSON its mapping needs
    │   └── ValidationFailed           (422 validation_error)
    │       ├── DefRefused             (422 tool_refused)      a *Def op refused (bad input, outside scope)
    │       └── MappingFailed          (422 mapping_failed)    a required webhook payload path is missing
    ├── Unauthorized                   (401 unauthorized)
    ├── Forbidden                      (403 insufficient_scope)  the token lacks the route's scope
    ├── NotFound                       (404 not_found)
    │   ├── RunNotFound                (404 run_not_found)
    │   ├── InterruptNotFound          (404 interrupt_not_found)
    │   ├── ResidentNotFound           (404 resident_not_found)  no open resident sub-agent of that run id
    │   ├── UnknownSchedule            (404 unknown_schedule)
    │   └── UnknownWebhook             (404 unknown_webhook)
    ├── Conflict                       (409 conflict)
    │   ├── RunFinished                (409 run_finished)      input/turn cancel for a finished run
    │   ├── NotInteractive             (409 not_interactive)
    │   ├── NotMidTurn                 (409 not_mid_turn)
    │   ├── InterruptSettled           (409 interrupt_settled)
    │   └── (codes) already_pausing, not_paused   POST /v1/_pause while pausing, /v1/_resume while running
    ├── InterruptExpired               (410 interrupt_expired)
    ├── BodyTooLarge                   (413 body_too_large)
    ├── MemoryQuotaExceeded            (413 value_too_large | memory_quota_exceeded)
    ├── EmbedderNotConfigured          (501 embedder_not_configured)  embed/search without memory.embedder
    ├── VectorUnavailable              (501 pgvector_not_installed)   vector Memory on a server without pgvector
    ├── EmbedderError                  (502 embedder_error | embedder_auth | embedder_unreachable | ...)
    ├── EmbeddingMaintenanceUnavailable (503 vector_unsupported | embedder_not_configured)  loomcycle's
    │                                  /v1/_memory/embed_stats | reembed | backfill_embeddings without them
    ├── QueueFull                      (429 queue_full)        too many undelivered inputs for a run
    ├── RateLimited                    (429 rate_limited)      per-webhook rate limit; carries Retry-After
    ├── TokenLimitExceeded             (429 token_limit_exceeded)  a hard budget (/v1/_limits) is spent
    ├── Backpressure                   (429 backpressure | per_user_quota_exhausted)  `concurrency:` caps
    ├── ChannelsUnavailable            (503 channels_unavailable)
    ├── ChannelPublishFailed           (503 channel_publish_failed)  a schedule/webhook publish failed
    ├── SecretUnresolvable             (503 secret_unresolvable)  a webhook's secret variable is unset
    ├── RuntimePaused                  (503 runtime_paused)    a new run while the runtime is paused (POST /v1/_pause)
    ├── SnapshotNotFound               (404 snapshot_not_found)
    ├── SnapshotTooLarge               (413 snapshot_too_large)  the document exceeds `max_bytes`
    ├── SnapshotRefused                (422 snapshot_version_too_new | snapshot_version_unknown |
    │                                   snapshot_checksum_mismatch | snapshot_invalid | snapshot_other_tenant |
    │                                   sql_not_enabled | sql_quota_exceeded | sql_statement_refused)
    ├── ToolError                      (tool failure; becomes a tool_result with is_error=true)
    │   ├── ToolNotPermitted           (the agent's tools: list does not name the tool)
    │   └── (volumes/, builtins/files/) path_refused, volume_refused, volumes_unavailable, file_not_found,
    │         file_too_large, volume_error, bash_unavailable; codes edit_no_match, edit_ambiguous, grep_timeout
    ├── ProviderError                  (502 provider_error)    a model call failed for good
    │   ├── ProviderAuthError          (502 auth_failed | missing_api_key)  401/403, or the key variable is unset
    │   ├── ContextLengthExceeded      (502 context_length_exceeded)  the prompt does not fit the model
    │   ├── UnknownModel               (502 unknown_model)     the provider does not serve that model
    │   ├── ProviderBadRequest         (502 provider_bad_request | request_too_large)  any other 4xx
    │   ├── ProviderProtocolError      (502 malformed_stream)  the response broke the vendor's wire format
    │   └── RetryableProviderError     (503 provider_unavailable) 5xx/overloaded; the engine retries it
    │         codes: rate_limited (429), provider_timeout, provider_unreachable, stream_truncated
    ├── StoreError                     (503 store_unavailable)
    │   ├── LeaseLost                  another worker owns the run now; the step is abandoned
    │   └── CancelPending              a cancel landed before the step could complete the run
    └── NotImplementedFeature          (501 not_implemented)   a documented feature this build lacks

HTTP mapping lives in one place: ``treadle.api.errors``. The engine never lets a ToolError
crash a run, and never lets a LeaseLost write anything.
"""

from __future__ import annotations

from typing import Any


class TreadleError(Exception):
    code = "internal_error"
    status = 500

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code


class ConfigError(TreadleError):
    code = "config_error"


class BadRequest(TreadleError):
    code = "bad_request"
    status = 400


class UnknownAgent(BadRequest):
    code = "unknown_agent"


class ValidationFailed(BadRequest):
    code = "validation_error"
    status = 422


class Unauthorized(TreadleError):
    code = "unauthorized"
    status = 401


class Forbidden(TreadleError):
    """The bearer is valid but lacks the scope the route needs (`scope`)."""

    code = "insufficient_scope"
    status = 403

    def __init__(self, message: str, *, scope: str) -> None:
        super().__init__(message)
        self.scope = scope

class NotFound(TreadleError):
    code = "not_found"
    status = 404


class RunNotFound(NotFound):
    code = "run_not_found"


class Conflict(TreadleError):
    code = "conflict"
    status = 409


class AgentGone(Conflict):
    """The run's agent no longer exists (a manual compaction needs it for the summary)."""

    code = "agent_gone"


class BodyTooLarge(TreadleError):
    code = "body_too_large"
    status = 413


class ToolError(TreadleError):
    code = "tool_error"
    status = 422


class ToolNotPermitted(ToolError):
    code = "tool_not_permitted"


class ProviderError(TreadleError):
    """A model call failed. `details` names the provider, model, HTTP status and the vendor's own
    error code when known (never a credential); the engine copies them into the `error` event."""

    code = "provider_error"
    status = 502

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code)
        self.details: dict[str, Any] = dict(details or {})


class ProviderAuthError(ProviderError):
    code = "auth_failed"


class ContextLengthExceeded(ProviderError):
    code = "context_length_exceeded"


class UnknownModel(ProviderError):
    code = "unknown_model"


class ProviderBadRequest(ProviderError):
    code = "provider_bad_request"


class ProviderProtocolError(ProviderError):
    code = "malformed_stream"


class RetryableProviderError(ProviderError):
    code = "provider_unavailable"
    status = 503

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: float | None = None,
        code: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code, details=details)
        self.retry_after_s = retry_after_s


class StoreError(TreadleError):
    code = "store_unavailable"
    status = 503


class LeaseLost(StoreError):
    code = "lease_lost"


class CancelPending(StoreError):
    """A completing commit found a cancel request: the engine ends the run cancelled instead.
    `reason`: the cancel's reason ("" when none was given)."""

    code = "cancel_pending"

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class NotImplementedFeature(TreadleError):
    code = "not_implemented"
    status = 501


# -- feature errors (routes and services raise these; the HTTP mapping stays in api/errors.py) --


class RunFinished(Conflict):
    code = "run_finished"


class NotInteractive(Conflict):
    code = "not_interactive"


class NotMidTurn(Conflict):
    code = "not_mid_turn"


class QueueFull(TreadleError):
    code = "queue_full"
    status = 429


class InterruptNotFound(NotFound):
    code = "interrupt_not_found"


class ResidentNotFound(NotFound):
    code = "resident_not_found"


class InterruptSettled(Conflict):
    code = "interrupt_settled"


class InterruptExpired(TreadleError):
    code = "interrupt_expired"
    status = 410


class UnknownSchedule(NotFound):
    code = "unknown_schedule"


class DefRefused(ValidationFailed):
    """An op the family refuses (bad input, invalid def, outside the caller's scope): 422."""

    code = "tool_refused"


class ChannelsUnavailable(TreadleError):
    code = "channels_unavailable"
    status = 503


class ChannelPublishFailed(TreadleError):
    code = "channel_publish_failed"
    status = 503


class SecretUnresolvable(TreadleError):
    """The answer to the sender says only that the secret is not configured; `detail` (the
    variable's name and why) goes to the triage record, for the operator."""

    code = "secret_unresolvable"
    status = 503

    def __init__(self, detail: str) -> None:
        super().__init__("this webhook's secret is not configured")
        self.detail = detail


class RuntimePaused(TreadleError):
    """A new run asked for while the runtime is pausing or paused (engine/pausing.py)."""

    code = "runtime_paused"
    status = 503


class SnapshotNotFound(NotFound):
    code = "snapshot_not_found"


class SnapshotTooLarge(TreadleError):
    """A snapshot larger than its `max_bytes` (loomcycle's 413 `snapshot_too_large`)."""

    code = "snapshot_too_large"
    status = 413


class SnapshotRefused(ValidationFailed):
    """A snapshot this treadle cannot restore: newer than it (`snapshot_version_too_new`), a section
    it does not know (`snapshot_version_unknown`), altered or cut (`snapshot_checksum_mismatch`), not
    a snapshot (`snapshot_invalid`), or holding another tenant's rows (`snapshot_other_tenant`); an
    SQL-memory scope it cannot recreate: no SQL memory here (`sql_not_enabled`), over the scope's
    byte quota (`sql_quota_exceeded`), a statement the SQL-memory floor refuses
    (`sql_statement_refused`) or one that fails as the scope's role (`snapshot_invalid`)."""

    code = "snapshot_invalid"


class BadDeliveryId(BadRequest):
    code = "bad_delivery_id"


class UnknownWebhook(NotFound):
    code = "unknown_webhook"


class RateLimited(TreadleError):
    code = "rate_limited"
    status = 429

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TokenLimitExceeded(TreadleError):
    """A hard budget of the run's tenant, user or agent is spent (governance/budgets.py): the run
    is refused before it starts; `body_extra` is loomcycle's 429 body (scope, scope_id, used,
    limit, window)."""

    code = "token_limit_exceeded"
    status = 429

    def __init__(self, message: str, body: dict[str, object]) -> None:
        super().__init__(message)
        self.body_extra = {k: v for k, v in body.items() if k not in ("code", "error")}


class Backpressure(TreadleError):
    """A new run over loomcycle's `concurrency:` caps (config ConcurrencyConfig): `backpressure`
    (the tenant's live runs) or `per_user_quota_exhausted` (the user's, with `user_id` and `cap`
    and `Retry-After: 5`)."""

    code = "backpressure"
    status = 429

    def __init__(self, message: str, *, code: str | None = None, retry_after_s: float | None = None,
                 body: dict[str, object] | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s
        self.body_extra = dict(body or {})


class BadPayload(BadRequest):
    code = "bad_payload"


class MappingFailed(ValidationFailed):
    code = "mapping_failed"


# -- substrate (Memory vector facet, Defs) ----------------------------------------------------------


class MemoryQuotaExceeded(TreadleError):
    """A value over `memory.max_value_bytes`, or a scope over its byte quota."""

    code = "memory_quota_exceeded"
    status = 413


class EmbedderNotConfigured(TreadleError):
    code = "embedder_not_configured"
    status = 501


class VectorUnavailable(TreadleError):
    code = "pgvector_not_installed"
    status = 501


class EmbeddingMaintenanceUnavailable(TreadleError):
    """loomcycle's 503 for its embedding maintenance routes on a server without pgvector
    (`vector_unsupported`) or without an embedder (`embedder_not_configured`)."""

    code = "vector_unsupported"
    status = 503


class EmbedderError(TreadleError):
    """The embedder failed (HTTP status, unreachable, bad answer); never carries a credential."""

    code = "embedder_error"
    status = 502
