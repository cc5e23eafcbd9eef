"""The outbound scrub's heuristic patterns (security/redact.py), behind its one-search prefilter."""

from __future__ import annotations

import pytest

from treadle.security.redact import SecretValues

SAMPLES = [
    ("AUTHORIZATION: Bearer abcdef123456", "AUTHORIZATION: Bearer [redacted]"),
    ("authorization=token xyz987", "authorization=token [redacted]"),
    ("key sk-abcdefghijklmnop1234 here", "key [redacted-key] here"),
    ("ghp_" + "a" * 36, "[redacted-token]"),
    ("github_pat_" + "B" * 22, "[redacted-token]"),
    ("AKIAABCDEFGHIJKLMNOP", "[redacted-aws-key]"),
    ("xoxb-1234567890ab", "[redacted-slack]"),
    ("Password: hunter22x", "Password: [redacted]"),
    ("API-KEY='abcdef1'", "API-KEY=[redacted]'"),
]


@pytest.mark.parametrize(("text", "scrubbed"), SAMPLES)
def test_each_pattern_is_scrubbed(text: str, scrubbed: str) -> None:
    assert SecretValues().scrub_text(text) == scrubbed


def test_text_with_no_pattern_is_returned_as_it_is() -> None:
    text = "an ordinary tool result: {\"key\":\"visits\",\"value\":42} — token count 7"
    assert SecretValues().scrub_text(text) is text


def test_several_patterns_in_one_text() -> None:
    text = "sk-abcdefghijklmnop1234 and xoxp-abcdefghijk and secret=abcdefgh"
    assert SecretValues().scrub_text(text) == "[redacted-key] and [redacted-slack] and secret=[redacted]"
