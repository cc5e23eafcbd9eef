"""loomcycle's introspection routes in the cloud shape (issue 39 item 5): the api function (its
lazy router) answers the model aliases, the routing view, the runnable agents, the resolver matrix
(before and after a probe: the mock lists its models), one provider's model list and /v1/config."""

from __future__ import annotations

from tests.cloud.test_cloud_path import call, envs
from tests.support.lambda_sim import LambdaEnv

__all__ = ["envs"]  # the fixture, shared with test_cloud_path


def test_the_api_function_answers_the_introspection_routes(envs: dict[str, LambdaEnv]) -> None:
    api = envs["api"]
    for path in ("/v1/_models", "/v1/_routing", "/v1/_runnable-agents", "/v1/config"):
        status, body, _ = call(api, "GET", path)
        assert status == 200, (path, body)
    status, matrix, _ = call(api, "GET", "/v1/_resolver")
    assert status == 200 and matrix["providers"]["mock"]["reachable"], matrix
    status, probed, _ = call(api, "POST", "/v1/_resolve/probe")
    assert status == 200 and probed["providers"]["mock"]["models"]["script"]["listed"], probed
    status, listed, _ = call(api, "GET", "/v1/_providers/mock/models")
    assert status == 200 and "echo" in listed["models"] and listed["provider"] == "mock", listed
    status, missing, _ = call(api, "GET", "/v1/_providers/nope/models")
    assert (status, missing["code"]) == (404, "provider_unknown")
    status, view, _ = call(api, "GET", "/v1/config")
    assert view["view"] == "admin" and view["features"]["scheduler"] == {"available": True}, view
