"""The Channel allowlist's matching (domain/channelacl.py), as loomcycle's `channelAllowed`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from treadle.config import AgentConfig
from treadle.domain.channelacl import acl_grants, channel_allowed, refusal


@pytest.mark.parametrize(("name", "allowlist", "allowed"), [
    ("team/a", ["team/*"], True),
    ("team/a/b", ["team/*"], True),
    ("team", ["team/*"], False),  # the prefix itself is not under it
    ("team/", ["team/*"], False),
    ("teams/a", ["team/*"], False),
    ("alerts", ["alerts"], True),
    (" alerts ", ["alerts"], True),
    ("alerts2", ["alerts"], False),
    ("team/../secret", ["team/*"], False),
    ("team//x", ["team/*"], False),
    ("anything", [], False),
])
def test_names_and_prefix_wildcards(name: str, allowlist: list[str], allowed: bool) -> None:
    assert channel_allowed(name, allowlist) is allowed


def test_refusals_say_what_to_add() -> None:
    assert refusal("publish", "team/a", ["team/*"]) is None
    assert "no subscribe allowlist" in str(refusal("subscribe", "x", []))
    assert "agent allowlist: ['y']" in str(refusal("publish", "x", ["y"]))


def test_grants_and_config_checks() -> None:
    assert acl_grants(None) is None
    assert acl_grants({"publish": ["b", "a"], "subscribe": ["a"]}) == ["publish:a", "publish:b", "subscribe:a"]
    assert AgentConfig.model_validate({"channels": {"publish": ["team/*"]}}).channels is not None
    for bad in ("team/../x", "team/**", "*", "a*/b", " "):
        with pytest.raises(ValidationError):
            AgentConfig.model_validate({"channels": {"subscribe": [bad]}})
    with pytest.raises(ValidationError):
        AgentConfig.model_validate({"channels": {"publish": [], "read": []}})  # an unknown side is refused by name
