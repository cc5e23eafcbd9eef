"""The CDK app: synthesized once in Python (aws_cdk.assertions), then linted with cfn-lint.
Synth takes ~10 s (jsii starts node), so every assertion shares one template."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="CDK synth needs node on PATH")

CONFIG = """\
agents:
  helper:
    provider: mock
    model: tool-caller
    tools: [Memory]
"""
FUNCTIONS = ("api", "worker", "webhook", "mcp", "scheduler", "maintenance")


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    sys.path.insert(0, str(ROOT / "infra"))
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from treadle_infra import TreadleRuntimeProps, TreadleStack

    tmp = tmp_path_factory.mktemp("cdk")
    (tmp / "layer" / "python").mkdir(parents=True)
    (tmp / "layer" / "python" / "placeholder.txt").write_text("a stand-in for the built layer\n")
    (tmp / "treadle.yaml").write_text(CONFIG)
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(tmp / "cdk.out"), context=context)
    props = TreadleRuntimeProps(layer_dir=tmp / "layer", staging_dir=tmp / "app", config_file=tmp / "treadle.yaml",
                                byte_compile=False)
    stack = TreadleStack(app, "Treadle", props=props)
    template = Template.from_stack(stack)
    return {"template": template, "json": template.to_json(), "tmp": tmp}


def resources(t: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in t["Resources"].items() if r["Type"] == rtype}


def function_id(t: dict[str, Any], name: str) -> str:
    [fid] = [k for k, r in resources(t, "AWS::Lambda::Function").items()
             if r["Properties"]["Handler"] == f"functions.{name}.handler.handler"]
    return fid


def entry_ref(t: dict[str, Any], name: str) -> dict[str, str]:
    """What triggers invoke: the function's `live` alias (SnapStart serves published versions only)."""
    [alias_id] = [k for k, r in resources(t, "AWS::Lambda::Alias").items()
                  if r["Properties"]["FunctionName"] == {"Ref": function_id(t, name)}]
    return {"Ref": alias_id}


def role_statements(t: dict[str, Any], fid: str) -> list[dict[str, Any]]:
    role = t["Resources"][fid]["Properties"]["Role"]["Fn::GetAtt"][0]
    out = []
    for pol in resources(t, "AWS::IAM::Policy").values():
        if {"Ref": role} in pol["Properties"]["Roles"]:
            out.extend(pol["Properties"]["PolicyDocument"]["Statement"])
    return out


def stmt_resources(s: dict[str, Any]) -> list[Any]:
    return s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]


def actions(stmts: list[dict[str, Any]]) -> set[str]:
    out: set[str] = set()
    for s in stmts:
        out.update([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    return out


def test_functions_layer_and_code(synth: dict[str, Any]) -> None:
    t = synth["json"]
    fns = resources(t, "AWS::Lambda::Function")
    assert sorted(r["Properties"]["Handler"] for r in fns.values()) == sorted(
        f"functions.{n}.handler.handler" for n in FUNCTIONS
    )
    [layer_id] = resources(t, "AWS::Lambda::LayerVersion")
    for r in fns.values():
        p = r["Properties"]
        assert p["Runtime"] == "python3.12" and p["Layers"] == [{"Ref": layer_id}]
        assert p["VpcConfig"]["SubnetIds"] and p["LoggingConfig"]["LogFormat"] == "JSON"
        env = p["Environment"]["Variables"]
        assert {"TREADLE_QUEUE_URL", "TREADLE_DB_SECRET_ARN", "TREADLE_DB_HOST", "TREADLE_CONFIG"} <= set(env)
    worker = fns[function_id(t, "worker")]["Properties"]
    assert worker["Timeout"] == 300 and "TREADLE_PROVIDER_KEYS_SECRET_ARN" in worker["Environment"]["Variables"]
    assert fns[function_id(t, "api")]["Properties"]["Timeout"] == 30
    groups = resources(t, "AWS::Logs::LogGroup")
    assert len(groups) == len(FUNCTIONS) and {g["Properties"]["RetentionInDays"] for g in groups.values()} == {30}

    staged = synth["tmp"] / "app"
    assert (staged / "treadle.yaml").read_text() == CONFIG
    # the functions read the same configuration as JSON (no PyYAML at a cold start)
    from treadle.config import load_config

    assert load_config(staged / "treadle.json") == load_config(staged / "treadle.yaml")
    assert {r["Properties"]["Environment"]["Variables"]["TREADLE_CONFIG"] for r in fns.values()} == {
        "/var/task/treadle.json"}
    for rel in ("treadle/runtime.py", "treadle/store/migrations/0002_pgvector.sql", "treadle_cloud/worker.py",
                *(f"functions/{n}/handler.py" for n in FUNCTIONS)):
        assert (staged / rel).is_file(), rel
    assert not list(staged.rglob("__pycache__")) and not (staged / "treadle_sidecar").exists()


def test_database_proxy_and_secrets(synth: dict[str, Any]) -> None:
    tpl, t = synth["template"], synth["json"]
    tpl.has_resource_properties("AWS::RDS::DBCluster", {
        "Engine": "aurora-postgresql",
        "EngineVersion": "17.5",
        "StorageEncrypted": True,
        "DatabaseName": "treadle",
        "ServerlessV2ScalingConfiguration": {"MinCapacity": 0.5, "MaxCapacity": 4},
    })
    tpl.has_resource_properties("AWS::RDS::DBInstance", {"DBInstanceClass": "db.serverless",
                                                         "PubliclyAccessible": False})
    tpl.has_resource_properties("AWS::RDS::DBProxy", {"EngineFamily": "POSTGRESQL", "RequireTLS": True})
    assert len(resources(t, "AWS::SecretsManager::Secret")) == 4  # database, API token, provider keys, webhooks
    [proxy] = resources(t, "AWS::RDS::DBProxy").values()
    assert proxy["Properties"]["VpcSubnetIds"]
    assert proxy["Properties"]["DBProxyName"] == "Treadle-proxy"  # unique per stack, not the construct id


def test_queue_dlq_and_event_source_mapping(synth: dict[str, Any]) -> None:
    tpl, t = synth["template"], synth["json"]
    queues = resources(t, "AWS::SQS::Queue")
    [(main_id, main)] = [(k, q) for k, q in queues.items() if "RedrivePolicy" in q["Properties"]]
    [dlq_id] = [k for k in queues if k != main_id]
    assert main["Properties"]["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]}, "maxReceiveCount": 10}
    assert main["Properties"]["VisibilityTimeout"] == 6 * 300
    assert not main["Properties"].get("FifoQueue")
    tpl.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "EventSourceArn": {"Fn::GetAtt": [main_id, "Arn"]},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "BatchSize": 5,
        "ScalingConfig": {"MaximumConcurrency": 20},
    })
    [mapping] = resources(t, "AWS::Lambda::EventSourceMapping").values()
    # the worker's live alias (CDK names it as function name + ":live")
    assert entry_ref(t, "worker")["Ref"] in json.dumps(mapping["Properties"]["FunctionName"])


def test_least_privilege_iam(synth: dict[str, Any]) -> None:
    t = synth["json"]
    for pol in resources(t, "AWS::IAM::Policy").values():
        for s in pol["Properties"]["PolicyDocument"]["Statement"]:
            assert s["Effect"] == "Allow" and "*" not in stmt_resources(s) and "*" not in actions([s]), s
    worker = actions(role_statements(t, function_id(t, "worker")))
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:SendMessage"} <= worker
    api = role_statements(t, function_id(t, "api"))
    assert "sqs:ReceiveMessage" not in actions(api) and "sqs:SendMessage" in actions(api)
    for fn in ("api", "maintenance"):  # ScheduleDef ops / reconciling every minute
        stmts = role_statements(t, function_id(t, fn))
        [sched] = [s for s in stmts if "scheduler:CreateSchedule" in actions([s])]
        assert "schedule/" in json.dumps(sched["Resource"]) and "iam:PassRole" in actions(stmts)

    [keys_id] = [k for k, r in resources(t, "AWS::SecretsManager::Secret").items() if "ProviderKeys" in k]
    readers = [fn for fn in FUNCTIONS
               if any({"Ref": keys_id} in stmt_resources(s) for s in role_statements(t, function_id(t, fn)))]
    assert readers == ["worker"]  # only the worker calls models
    [hooks_id] = [k for k in resources(t, "AWS::SecretsManager::Secret") if "WebhookSecrets" in k]
    readers = [fn for fn in FUNCTIONS
               if any({"Ref": hooks_id} in stmt_resources(s) for s in role_statements(t, function_id(t, fn)))]
    assert readers == ["webhook"]  # only the webhook function verifies signatures
    for fn in ("scheduler", "worker", "webhook", "mcp"):
        assert not any("scheduler:" in a for a in actions(role_statements(t, function_id(t, fn))))


def test_http_api_routes(synth: dict[str, Any]) -> None:
    tpl, t = synth["template"], synth["json"]
    routes = {r["Properties"]["RouteKey"] for r in resources(t, "AWS::ApiGatewayV2::Route").values()}
    assert routes == {"ANY /{proxy+}", "ANY /v1/_webhooks/{proxy+}", "ANY /v1/_mcp"}
    tpl.has_resource_properties("AWS::ApiGatewayV2::Api", {"ProtocolType": "HTTP"})
    tpl.resource_count_is("AWS::ApiGatewayV2::Integration", 3)
    tpl.has_resource_properties("AWS::ApiGatewayV2::Integration", {"PayloadFormatVersion": "2.0"})
    assert set(t["Outputs"]) >= {"ApiUrl", "QueueUrl"}


def test_scheduler_group_role_and_maintenance_schedule(synth: dict[str, Any]) -> None:
    tpl, t = synth["template"], synth["json"]
    tpl.resource_count_is("AWS::Scheduler::ScheduleGroup", 1)
    [group] = resources(t, "AWS::Scheduler::ScheduleGroup").values()
    assert group["DeletionPolicy"] == "Delete"  # cdk destroy removes it (and the schedules in it)
    [schedule] = resources(t, "AWS::Scheduler::Schedule").values()
    assert schedule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    assert schedule["Properties"]["Target"]["Arn"] == entry_ref(t, "maintenance")
    roles = [r for r in resources(t, "AWS::IAM::Role").values()
             if "scheduler.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    assert len(roles) == 2  # the group's (for treadle's schedules) and the maintenance schedule's


def test_snapstart_versions_and_aliases(synth: dict[str, Any]) -> None:
    """Every function snapshots its published versions, and every trigger invokes the `live`
    alias of the current version (the HTTP API, SQS, the maintenance schedule, treadle's own
    schedules through TREADLE_SCHEDULER_TARGET_ARN)."""
    t = synth["json"]
    fns = resources(t, "AWS::Lambda::Function")
    versions = resources(t, "AWS::Lambda::Version")
    aliases = resources(t, "AWS::Lambda::Alias")
    assert len(versions) == len(aliases) == len(FUNCTIONS)
    for name in FUNCTIONS:
        fid = function_id(t, name)
        assert fns[fid]["Properties"]["SnapStart"] == {"ApplyOn": "PublishedVersions"}
        [alias] = [a for k, a in aliases.items() if {"Ref": k} == entry_ref(t, name)]
        assert alias["Properties"]["Name"] == "live"
        version_id = alias["Properties"]["FunctionVersion"]["Fn::GetAtt"][0]
        assert versions[version_id]["Properties"]["FunctionName"] == {"Ref": fid}
    integrations = json.dumps(resources(t, "AWS::ApiGatewayV2::Integration"))
    for name in ("api", "webhook", "mcp"):
        assert entry_ref(t, name)["Ref"] in integrations and function_id(t, name) not in integrations
    api_env = fns[function_id(t, "api")]["Properties"]["Environment"]["Variables"]
    assert api_env["TREADLE_SCHEDULER_TARGET_ARN"] == entry_ref(t, "scheduler")
    assert api_env["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
    # the scheduler role may invoke the alias treadle's schedules target
    invoke = [s for pol in resources(t, "AWS::IAM::Policy").values()
              for s in pol["Properties"]["PolicyDocument"]["Statement"] if "lambda:InvokeFunction" in actions([s])]
    assert any(entry_ref(t, "scheduler") in stmt_resources(s) for s in invoke)


def test_alarms(synth: dict[str, Any]) -> None:
    t = synth["json"]
    alarms = resources(t, "AWS::CloudWatch::Alarm")
    [dlq_alarm] = [a for a in alarms.values() if a["Properties"]["MetricName"] == "ApproximateNumberOfMessagesVisible"]
    p = dlq_alarm["Properties"]
    assert p["Threshold"] == 1 and p["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    [topic_id] = resources(t, "AWS::SNS::Topic")
    assert p["AlarmActions"] == [{"Ref": topic_id}]


def test_cfn_lint_finds_no_errors(synth: dict[str, Any]) -> None:
    path = synth["tmp"] / "Treadle.template.json"
    path.write_text(json.dumps(synth["json"]))
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    proc = subprocess.run([str(cfn_lint), "--format", "json", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 4, 8, 12), proc.stderr  # bit 2: errors; 4: warnings; 8: informational
    findings = json.loads(proc.stdout or "[]")
    errors = [f for f in findings if f["Level"] == "Error"]
    assert errors == [], errors


def test_a_yaml_config_json_cannot_hold_stays_yaml(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "infra"))
    from treadle_infra.assets import config_as_json, stage_app_code, staged_config_name

    dated = CONFIG + "# a date JSON has no type for:\nchannels:\n  c:\n    description: 2026-11-21\n"
    assert config_as_json(dated) is None
    staged = stage_app_code(dated, tmp_path / "app")
    assert staged_config_name(staged) == "treadle.yaml" and not (staged / "treadle.json").exists()
    staged = stage_app_code(CONFIG, tmp_path / "app")
    assert staged_config_name(staged) == "treadle.json"


def test_staged_code_can_ship_hash_checked_bytecode(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "infra"))
    from treadle_infra.assets import stage_app_code, starter_config

    out = stage_app_code(starter_config(), tmp_path / "app", compile_with=sys.executable)
    tag = sys.implementation.cache_tag
    pyc = out / "treadle" / "__pycache__" / f"runtime.{tag}.pyc"
    flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
    assert flags == 0b01  # hash-based, unchecked: independent of file times, so the asset hash is stable
    assert (out / "functions" / "worker" / "__pycache__" / f"handler.{tag}.pyc").is_file()


def test_stack_scoped_names() -> None:
    """Two stacks in one account and region get different proxy names (staging beside prod)."""
    sys.path.insert(0, str(ROOT / "infra"))
    from treadle_infra.runtime import proxy_name

    assert proxy_name("Treadle") != proxy_name("TreadleStaging")
    assert proxy_name("my_app.prod") == "my-app-prod-proxy" and proxy_name("9lives").startswith("t-")
    assert len(proxy_name("x" * 200)) <= 60

