"""Misspelled `TREADLE_*` variables: treadle reads each setting by its exact name, so a typo is
silently ignored — unless someone says so. `treadle serve` and `treadle doctor` do."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping

from treadle.envsettings import ENV_PREFIX, EnvSettings

#: variables read outside the EnvSettings models: directly (os.environ), by the cloud shape's
#: CloudSettings (treadle_cloud/env.py — kept in step by tests/unit/test_envcheck.py), or by scripts
OTHER_NAMES = frozenset({
    # read directly
    "TREADLE_CREDENTIALS_KEY", "TREADLE_CREDENTIALS_KEY_PREVIOUS", "TREADLE_MCP_TOKEN", "TREADLE_LOG_FORMAT",
    "TREADLE_LOG_LEVEL",
    "TREADLE_URL", "TREADLE_TOOL_USE_ID",
    "TREADLE_EMF", "TREADLE_METRICS_NAMESPACE", "TREADLE_REQUIRE_PGVECTOR", "TREADLE_STREAM_HOST",
    "TREADLE_HOOKS_SECRET", "TREADLE_PUBLIC_CONFIG",
    # scripts/image_smoke.sh (.ci/run runs it unless TREADLE_IMAGE_SMOKE=0)
    "TREADLE_IMAGE_SMOKE", "TREADLE_IMAGE_WORK", "TREADLE_DEBIAN_MIRROR",
    # the Python client (treadle/client): its bearer, else TREADLE_AUTH_TOKEN
    "TREADLE_TOKEN",
    # scripts/demo.sh, scripts/test.sh
    "TREADLE_DEMO_EXIT", "TREADLE_TEST_WORKERS",
    # tests/frontdoors: where `npm install openai` ran (the npm SDK test skips without it)
    "TREADLE_OPENAI_NPM",
    # tests/loomcycle: loomcycle's TypeScript client, built (the TS client test skips without it)
    "TREADLE_LOOMCYCLE_TS",
    # tests/loomcycle: a checkout of loomcycle's repository (its code-js configs; skipped without it)
    "TREADLE_LOOMCYCLE_SRC",
    # the cloud shape (CloudSettings)
    "TREADLE_QUEUE_URL", "TREADLE_DB_SECRET_ARN", "TREADLE_DB_HOST", "TREADLE_DB_NAME", "TREADLE_DB_PORT",
    "TREADLE_DB_SSLMODE", "TREADLE_DB_POOL_SIZE", "TREADLE_API_TOKEN_SECRET_ARN",
    "TREADLE_PROVIDER_KEYS_SECRET_ARN", "TREADLE_WEBHOOK_SECRETS_SECRET_ARN", "TREADLE_SCHEDULER_ROLE_ARN",
    "TREADLE_SCHEDULER_TARGET_ARN", "TREADLE_SCHEDULE_GROUP", "TREADLE_SSE_BUDGET_SECONDS",
    "TREADLE_STEP_SAFETY_SECONDS", "TREADLE_MIN_STEP_SECONDS", "TREADLE_CHAIN_RESERVE_SECONDS",
    "TREADLE_VOLUMES_BUCKET", "TREADLE_VOLUMES_PREFIX", "TREADLE_DB_OUTAGE_SECONDS",
})


def _models() -> list[type[EnvSettings]]:
    from treadle.config import Settings
    from treadle.security.network import NetworkEnv  # noqa: F401  (registers the subclass)
    from treadle.triggers.settings import TriggerSettings  # noqa: F401

    seen: list[type[EnvSettings]] = [Settings]
    stack = list(EnvSettings.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.append(cls)
            stack.extend(cls.__subclasses__())
    return seen


def known_names() -> set[str]:
    names = set(OTHER_NAMES)
    for cls in _models():
        for name, info in cls.model_fields.items():
            alias = info.validation_alias
            names.add((alias if isinstance(alias, str) else cls.env_prefix + name).upper())
    return names


def unknown_variables(env: Mapping[str, str] | None = None, known: Iterable[str] | None = None) -> list[str]:
    """One line per `TREADLE_*` variable treadle does not read, with the closest known name."""
    known_set = set(known) if known is not None else known_names()
    lines = []
    for name in sorted(env if env is not None else os.environ):
        if name.upper().startswith(ENV_PREFIX) and name.upper() not in known_set:
            close = difflib.get_close_matches(name.upper(), sorted(known_set), n=1, cutoff=0.75)
            hint = f"; did you mean {close[0]}?" if close else ""
            lines.append(f"{name} is not a treadle setting (ignored){hint}")
    return lines
