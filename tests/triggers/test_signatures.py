"""Signature verification (no I/O): each vendor's format as the vendor documents producing it,
Stripe's own library as a second opinion, and the secret-variable policy."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import stripe

from tests.support.signing import generic_signature, github_headers, linear_headers, stripe_header
from treadle.specs.webhook import WebhookAuth
from treadle.triggers import signatures as signature
from treadle.triggers.signatures import BadDeliveryId, InvalidSignature, SecretUnresolvable

ENV = {"GH": "gh-secret", "ST": "whsec_test_0123456789", "LN": "lin-secret", "TOK": "bearer-token"}
BODY = json.dumps({"id": "evt_1NG8Du2eZvKYlo2CUI79vXWy", "type": "invoice.paid", "n": 1}).encode()


def auth(**kw: Any) -> WebhookAuth:
    return WebhookAuth(**kw)


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def check(a: WebhookAuth, headers: dict[str, str], body: bytes = BODY, **kw: Any) -> None:
    signature.verify(a, lower(headers), body, environ=ENV, **kw)


GH = auth(header="X-Hub-Signature-256", signing_secret_env="GH")
ST = auth(header="Stripe-Signature", signing_secret_env="ST")
LN = auth(header="Linear-Signature", signing_secret_env="LN")


def test_github() -> None:
    headers = github_headers(ENV["GH"], BODY)
    check(GH, headers)
    check(GH, {**headers, "X-Hub-Signature-256": headers["X-Hub-Signature-256"].upper().replace("SHA256=", "sha256=")})
    for body in (BODY[:-1], BODY + b"\n", json.dumps(json.loads(BODY), indent=1).encode(), b""):
        with pytest.raises(InvalidSignature):
            check(GH, headers, body)
    for value in ("sha1=" + "0" * 40, headers["X-Hub-Signature-256"][7:], "sha256=" + "g" * 64, "sha256="):
        with pytest.raises(InvalidSignature):
            check(GH, {"X-Hub-Signature-256": value})
    assert signature.delivery_id(GH, lower(headers), BODY) == headers["X-GitHub-Delivery"]


def test_stripe_headers_we_produce_satisfy_stripes_own_verifier_and_ours() -> None:
    ours = stripe_header(ENV["ST"], BODY)
    assert stripe.WebhookSignature.verify_header(BODY.decode(), ours, ENV["ST"], tolerance=300)
    check(ST, {"Stripe-Signature": ours})
    theirs = stripe.WebhookSignature.generate_signature_header(BODY.decode(), ENV["ST"])
    check(ST, {"Stripe-Signature": theirs})
    event = stripe.Webhook.construct_event(BODY, ours, ENV["ST"])
    assert event["id"] == signature.delivery_id(ST, lower({"Stripe-Signature": ours}), BODY)


def test_stripe_rejections() -> None:
    now = int(time.time())
    stale = stripe_header(ENV["ST"], BODY, now - 301)
    with pytest.raises(InvalidSignature) as info:
        check(ST, {"Stripe-Signature": stale})
    assert info.value.verdict == "rejected_stale"
    with pytest.raises(stripe.SignatureVerificationError):  # Stripe agrees it is stale
        stripe.WebhookSignature.verify_header(BODY.decode(), stale, ENV["ST"], tolerance=300)
    check(ST, {"Stripe-Signature": stripe_header(ENV["ST"], BODY, now - 299)})
    with pytest.raises(InvalidSignature):
        check(ST, {"Stripe-Signature": stripe_header(ENV["ST"], BODY, now + 400)})
    good = stripe_header(ENV["ST"], BODY, now)
    t, v1 = good.split(",")
    # several v1 (secret rotation): any one matching is enough; v0 alone never is
    check(ST, {"Stripe-Signature": f"{t},v1={'0' * 64},{v1}"})
    for value in (f"{t},v0={v1[3:]}", v1, t, f"t=abc,{v1}", f"{t},v1=", ""):
        with pytest.raises(InvalidSignature):
            check(ST, {"Stripe-Signature": value})
    with pytest.raises(InvalidSignature):
        check(ST, {"Stripe-Signature": good}, BODY.replace(b'"n": 1', b'"n": 2'))
    with pytest.raises(InvalidSignature):  # signed with another endpoint's secret
        check(ST, {"Stripe-Signature": stripe_header("whsec_other", BODY, now)})


def test_linear_and_generic() -> None:
    headers = linear_headers(ENV["LN"], BODY, "d-1")
    check(LN, headers)
    with pytest.raises(InvalidSignature):
        check(LN, headers, BODY + b" ")
    with pytest.raises(InvalidSignature):
        check(LN, {**headers, "Linear-Signature": "sha256=" + headers["Linear-Signature"]})
    assert signature.delivery_id(LN, lower(headers), BODY) == "d-1"
    generic = auth(signing_secret_env="GH")
    sig = generic_signature(ENV["GH"], BODY)
    check(generic, {"X-Treadle-Signature": sig})
    check(generic, {"X-Treadle-Signature": f"sha256={sig}"})
    custom = auth(signing_secret_env="GH", header="X-Signature", format="generic")
    check(custom, {"X-Signature": sig})
    with pytest.raises(InvalidSignature, match="missing X-Signature"):
        check(custom, {"X-Treadle-Signature": sig})
    assert signature.delivery_id(generic, {}, BODY).startswith("sha256:")


def test_bearer() -> None:
    a = auth(kind="bearer", bearer_token_env="TOK")
    check(a, {"Authorization": "Bearer bearer-token"})
    check(a, {"Authorization": "bearer   bearer-token "})
    for value in ("Bearer bearer-tokenX", "Bearer ", "Basic bearer-token", ""):
        with pytest.raises(InvalidSignature):
            check(a, {"Authorization": value})
    h = auth(kind="bearer", bearer_token_env="TOK", header="X-Token")
    check(h, {"X-Token": "bearer-token"})
    with pytest.raises(InvalidSignature):
        check(h, {"Authorization": "Bearer bearer-token"})


def test_secret_policy() -> None:
    a = auth(signing_secret_env="MISSING")
    with pytest.raises(SecretUnresolvable) as info:
        check(a, {"X-Treadle-Signature": "0" * 64})
    assert "MISSING" not in info.value.message and info.value.detail == "the secret variable MISSING is not set"
    for name in ("DATABASE_URL", "TREADLE_AUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "ANTHROPIC_API_KEY",
                 "TREADLE_DB_SECRET_ARN"):
        with pytest.raises(SecretUnresolvable) as info:
            signature.resolve_secret(name, environ={name: "x"})
        assert "not allowed" in info.value.detail
    assert signature.resolve_secret("GH", frozenset({"GH"}), ENV) == "gh-secret"
    with pytest.raises(SecretUnresolvable):
        signature.resolve_secret("LN", frozenset({"GH"}), ENV)


def test_delivery_ids_are_validated() -> None:
    headers = {**github_headers(ENV["GH"], BODY), "X-GitHub-Delivery": "id with spaces\nand newline"}
    with pytest.raises(BadDeliveryId):
        signature.delivery_id(GH, lower(headers), BODY)
    st = stripe_header(ENV["ST"], b'{"id": 5}')
    with pytest.raises(BadDeliveryId):  # a Stripe event's id is a string
        signature.delivery_id(ST, lower({"Stripe-Signature": st}), b'{"id": 5}')
    no_id = signature.delivery_id(ST, lower({"Stripe-Signature": st}), b'{"type": "x"}')
    assert no_id.startswith("sha256:")


GENERIC = auth(signing_secret_env="GH")  # no header named: treadle's X-Treadle-Signature, or loomcycle's


def test_loomcyles_signature_header_in_its_three_envelopes() -> None:
    """loomcycle's receiver (internal/api/webhook/signature.go verifyHMAC) reads
    X-Loomcycle-Signature by default: Stripe's `t=,v1=` envelope, `sha256=<hex>` or bare hex."""
    secret = ENV["GH"]
    now = time.time()
    for value in (stripe_header(secret, BODY, int(now)), "sha256=" + signature.hmac_hex(secret, BODY),
                  signature.hmac_hex(secret, BODY)):
        check(GENERIC, {"X-Loomcycle-Signature": value}, now=now)
        with pytest.raises(InvalidSignature):
            check(GENERIC, {"X-Loomcycle-Signature": value}, BODY + b" ", now=now)
    with pytest.raises(InvalidSignature):  # Stripe's envelope keeps its 5-minute window
        check(GENERIC, {"X-Loomcycle-Signature": stripe_header(secret, BODY, int(now) - 600)}, now=now)
    with pytest.raises(InvalidSignature, match="X-Treadle-Signature"):  # treadle's header wins when given
        check(GENERIC, {"X-Treadle-Signature": "0" * 64, "X-Loomcycle-Signature": signature.hmac_hex(secret, BODY)})
    named = auth(header="X-Treadle-Signature", signing_secret_env="GH")  # a def that names its header
    with pytest.raises(InvalidSignature, match="missing X-Treadle-Signature"):
        check(named, {"X-Loomcycle-Signature": signature.hmac_hex(secret, BODY)})
