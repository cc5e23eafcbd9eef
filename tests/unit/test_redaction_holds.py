"""Redaction that holds (issue 42 item 5): known values in every encoding, secret-shaped strings
at rest (with the operator switch), JSON kept valid, run credentials remembered, in one pass."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest

from treadle.mcp.credentials import seal_credentials
from treadle.security import redact
from treadle.security.redact import SECRETS, SecretValues

KEY = "sk-ant-api03-Zq8vN3kT5rW1yX7bP2mL9cD4fH6jG0sA"
ODD = 'pa"ss\\word+/=&?ü 12345'


def encodings(value: str) -> list[str]:
    raw = value.encode()
    return [value, json.dumps(value)[1:-1], quote(value, safe=""), raw.hex(), raw.hex().upper(),
            base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
            base64.b64encode(b"xy" + raw + b"z").decode()]


@pytest.mark.parametrize("value", [KEY, ODD])
def test_a_known_value_is_redacted_in_every_encoding(value: str) -> None:
    sv = SecretValues()
    sv.add(value, "MY_KEY")
    for form in encodings(value):
        text = f"before {form} after"
        for out in (sv.redact_text(text), sv.scrub_text(text)):
            assert "[redacted:MY_KEY]" in out, (form, out)
            assert value not in out and form not in out


def test_secret_shapes_are_redacted_at_rest_and_json_stays_valid() -> None:
    doc = {"text": 'call with Authorization: Bearer abcdefghijklmnopqrstuvwx and "Bearer ZYXWVUTSRQPONMLKJIH123"',
           "input": {"password": "hunter22hunter", "note": 'password="hunter22x" then sk-abcdefghijklmnop1234'},
           "aws": "AKIAABCDEFGHIJKLMNOP", "gh": "ghp_" + "a" * 36}
    text = json.dumps(doc)
    out = SecretValues().redact_text(text)
    back = json.loads(out)  # still JSON
    flat = json.dumps(back)
    for secret in ("abcdefghijklmnopqrstuvwx", "ZYXWVUTSRQPONMLKJIH123", "hunter22hunter", "hunter22x",
                   "abcdefghijklmnop1234", "ABCDEFGHIJKLMNOP", "a" * 36):
        assert secret not in flat.replace("[redacted", ""), (secret, flat)
    assert back["input"]["password"] == "[redacted]"


def test_the_operator_switch_keeps_shapes_at_rest_but_never_values() -> None:
    sv = SecretValues()
    sv.add(KEY, "K")
    sv.patterns_at_rest = False
    text = f"password=hunter22hunter {KEY}"
    assert sv.redact_text(text) == "password=hunter22hunter [redacted:K]"
    assert sv.scrub_text(text) == "password=[redacted] [redacted:K]"  # outbound always


def test_a_generic_token_field_is_scrubbed_outbound_only() -> None:
    sv = SecretValues()
    text = "token = self._token_value"
    assert sv.redact_text(text) is text
    assert sv.scrub_text(text) == "token = [redacted]"


def test_the_longest_overlapping_value_wins() -> None:
    sv = SecretValues()
    sv.add("abcdefgh12345678", "SHORT")
    sv.add("abcdefgh12345678ZZZZ", "LONG")
    assert sv.redact_text("x abcdefgh12345678ZZZZ y") == "x [redacted:LONG] y"
    assert sv.redact_text("x abcdefgh12345678 y") == "x [redacted:SHORT] y"


def test_text_with_no_candidate_is_returned_as_it_is() -> None:
    sv = SecretValues()
    sv.add(KEY, "K")
    text = json.dumps([{"title": f"result {i}", "body": "lorem ipsum " * 20} for i in range(100)])
    assert sv.redact_text(text) is text and sv.scrub_text(text) is text


def test_run_time_values_are_kept_for_the_last_few(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact, "DYNAMIC_CAP", 2)
    sv = SecretValues()
    before = sv.generation
    for v in ("first-credential-1", "second-credential-2", "third-credential-3"):
        sv.add_dynamic(v)
    assert sv.generation == before + 3
    assert sv.redact_text("first-credential-1") == "first-credential-1"  # forgotten (the oldest)
    assert sv.redact_text("third-credential-3 second-credential-2") == \
        "[redacted:credential] [redacted:credential]"


def test_sealing_a_runs_credentials_makes_this_process_redact_them() -> None:
    value = "vault-token-4f9a1c7e2b"
    assert seal_credentials("t", {"vault": value}) is not None
    stored = json.dumps({"memory": value, "b64": base64.b64encode(value.encode()).decode()})
    out = SECRETS.redact_text(stored)
    assert value not in out and "[redacted:credential]" in out


def test_a_short_text_found_clean_is_redacted_once_its_value_becomes_known() -> None:
    """redact_text remembers short clean texts; a new known value (or a switch) forgets them."""
    s = SecretValues()
    word = "ghq_notasecret_yet_1234567"
    assert s.redact_text(word) == word and s.redact_text(word) == word  # the second from memory
    s.add(word, "LATE_TOKEN")
    assert s.redact_text(word) == "[redacted:LATE_TOKEN]"
    dynamic = "run-credential-0123456789"
    assert s.redact_text(dynamic) == dynamic
    s.add_dynamic(dynamic, "cred")
    assert s.redact_text(dynamic) == "[redacted:cred]"
    shaped = "sk-" + "a" * 40
    s.patterns_at_rest = False
    assert s.redact_text(shaped) == shaped
    s.patterns_at_rest = True
    assert s.redact_text(shaped) != shaped


def test_a_text_clean_at_rest_is_still_scrubbed_outbound() -> None:
    """The two passes remember clean texts apart: a generic token field is clean at rest only."""
    s = SecretValues()
    field = 'token="abcdefghijklmnopqrstuvwxyz012345"'
    assert s.redact_text(field) == field and s.redact_text(field) == field
    assert s.scrub_text(field) != field
