"""The operator's `pricing:` table (loomcycle's shape, `internal/config/pricing.go`): a default
currency and, per "provider/model" (the served pair, aliases resolved), prices per million tokens
for each token bucket. Usage is priced when a call is recorded (store/migrations/0045)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: float = Field(default=0.0, ge=0)
    output: float = Field(default=0.0, ge=0)
    cache_write: float = Field(default=0.0, ge=0)
    cache_read: float = Field(default=0.0, ge=0)
    currency: str = ""


class PricingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    currency: str = "USD"
    models: dict[str, ModelPrice] = {}

    @field_validator("models")
    @classmethod
    def _pairs(cls, value: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        for key in value:
            provider, _, model = key.partition("/")
            if not provider or not model:
                raise ValueError(f"pricing.models key {key!r}: must be 'provider/model'")
        return value

    def rows(self) -> list[tuple[str, str, float, float, float, float, str]]:
        """(provider, model, input, output, cache_write, cache_read, currency) per priced pair."""
        out = []
        for key, p in self.models.items():
            provider, _, model = key.partition("/")
            out.append((provider, model, p.input, p.output, p.cache_write, p.cache_read,
                        p.currency or self.currency or "USD"))
        return out
