"""Every error treadle raises on purpose, with its stable code and HTTP status.

    TreadleError                       (500 internal_error)
    ├── ConfigError                    (500 config_error)      invalid treadle.yaml / env, names file + key path
    ├── BadRequest                     (400 bad_request)
    │   ├── UnknownAgent               (400 unknown_agent)
    │   └── ValidationFailed           (422 validation_error)
    ├── Unauthorized                   (401 unauthorized)
    ├── NotFound                       (404 not_found)
    │   └── RunNotFound                (404 run_not_found)
    ├── Conflict                       (409 conflict)
    ├── BodyTooLarge                   (413 body_too_large)
    ├── ToolError                      (tool failure; becomes a tool_result with is_error=true)
    │   └── ToolNotPermitted           (the agent's tools: list does not name the tool)
    ├── ProviderError                  (502 provider_error)    a model call failed for good
    │   └── RetryableProviderError     (503 provider_unavailable) 429/5xx-like; the engine retries it
    ├── StoreError                     (503 store_unavailable)
    │   └── LeaseLost                  another worker owns the run now; the step is abandoned
    └── NotImplementedFeature          (501 not_implemented)   a documented feature this build lacks

HTTP mapping lives in one place: ``treadle.api.errors``. The engine never lets a ToolError
crash a run, and never lets a LeaseLost write anything.
"""

from __future__ import annotations


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


class NotFound(TreadleError):
    code = "not_found"
    status = 404


class RunNotFound(NotFound):
    code = "run_not_found"


class Conflict(TreadleError):
    code = "conflict"
    status = 409


class BodyTooLarge(TreadleError):
    code = "body_too_large"
    status = 413


class ToolError(TreadleError):
    code = "tool_error"
    status = 422


class ToolNotPermitted(ToolError):
    code = "tool_not_permitted"


class ProviderError(TreadleError):
    code = "provider_error"
    status = 502


class RetryableProviderError(ProviderError):
    code = "provider_unavailable"
    status = 503

    def __init__(self, message: str, *, retry_after_s: float | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class StoreError(TreadleError):
    code = "store_unavailable"
    status = 503


class LeaseLost(StoreError):
    code = "lease_lost"


class NotImplementedFeature(TreadleError):
    code = "not_implemented"
    status = 501
