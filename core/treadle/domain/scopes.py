"""The closed catalogue of bearer-token scopes (loomcycle's, plus `webhooks:admin`), and what each
implies. `substrate:admin` satisfies every scope."""

from __future__ import annotations

from collections.abc import Iterable

from treadle.errors import ValidationFailed

ADMIN = "substrate:admin"
TENANT = "substrate:tenant"
USER = "substrate:user"
RUNS_CREATE = "runs:create"
RUNS_READ = "runs:read"
CHANNEL_PUBLISH = "channel:publish"
CHANNEL_READ = "channel:read"
WEBHOOKS_ADMIN = "webhooks:admin"

#: every scope a token may hold, with the scopes it implies (itself included)
IMPLIES: dict[str, frozenset[str]] = {
    ADMIN: frozenset({ADMIN}),  # satisfies everything: see `satisfies`
    TENANT: frozenset({TENANT, RUNS_CREATE, RUNS_READ, CHANNEL_PUBLISH, CHANNEL_READ}),
    USER: frozenset({USER, RUNS_CREATE, RUNS_READ}),
    RUNS_CREATE: frozenset({RUNS_CREATE}),
    RUNS_READ: frozenset({RUNS_READ}),
    CHANNEL_PUBLISH: frozenset({CHANNEL_PUBLISH}),
    CHANNEL_READ: frozenset({CHANNEL_READ}),
    WEBHOOKS_ADMIN: frozenset({WEBHOOKS_ADMIN}),
}
MAX_SCOPES = 64


def satisfies(held: Iterable[str], needed: str) -> bool:
    held = tuple(held)
    return ADMIN in held or any(needed in IMPLIES.get(s, ()) for s in held)


def parse_scopes(value: object, *, what: str = "scopes") -> tuple[str, ...]:
    """A validated, sorted scope list; unknown scopes are refused (the catalogue is closed)."""
    if isinstance(value, str):
        value = [s for s in value.replace(",", " ").split() if s]
    if not isinstance(value, list | tuple) or not value or not all(isinstance(s, str) for s in value):
        raise ValidationFailed(f"{what}: a non-empty list of scopes ({', '.join(IMPLIES)})")
    if len(value) > MAX_SCOPES:
        raise ValidationFailed(f"{what}: at most {MAX_SCOPES} scopes")
    unknown = sorted(set(value) - set(IMPLIES))
    if unknown:
        raise ValidationFailed(f"{what}: unknown scope(s) {', '.join(unknown)} (known: {', '.join(IMPLIES)})")
    return tuple(sorted(set(value)))
