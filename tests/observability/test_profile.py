"""deploy/observability: no Docker engine runs here, so the files are checked for what can go
wrong without one — each config parses, every name one file uses is defined by another (compose
services, ports, pipeline components, datasource uids), and every series the dashboard queries is
one treadle's /metrics really exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import generate_latest

from treadle.api.metrics import DbSnapshot
from treadle.telemetry.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "deploy" / "observability"


def load(name: str) -> Any:
    return yaml.safe_load((PROFILE / name).read_text())


def test_compose_overlay_mounts_files_that_exist_and_pins_images() -> None:
    base = yaml.safe_load((ROOT / "docker-compose.example.yaml").read_text())
    compose = load("docker-compose.yaml")
    services = compose["services"]
    assert set(services) == {"treadle", "otel-collector", "tempo", "prometheus", "grafana"}
    assert "treadle" in base["services"]  # the overlay extends the example's service
    for name, svc in services.items():
        if name == "treadle":
            continue
        image = svc["image"]
        assert ":" in image and not image.endswith(":latest"), image
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)
        for vol in svc.get("volumes", []):
            src = vol.split(":", 1)[0]
            if src.startswith("./"):  # relative to the repository root (the first compose file's folder)
                path = ROOT / src
                assert path.exists() or path.name == "treadle-token", src
    assert (PROFILE / ".gitignore").read_text().split() == ["treadle-token"]
    env = services["treadle"]["environment"]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert env["TREADLE_LOG_FORMAT"] == "json"


def test_collector_pipeline_is_complete_and_reaches_tempo() -> None:
    col = load("otel-collector.yaml")
    assert col["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    for pipeline in col["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline[kind]:
                assert component in col[kind], (kind, component)
    for ext in col["service"]["extensions"]:
        assert ext in col["extensions"]
    host, port = col["exporters"]["otlp/tempo"]["endpoint"].split(":")
    tempo = load("tempo.yaml")
    assert host in load("docker-compose.yaml")["services"]
    assert tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(f":{port}")


def test_prometheus_scrapes_treadle_with_the_bearer_token() -> None:
    prom = load("prometheus.yml")
    (job,) = prom["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["authorization"]["type"] == "Bearer"
    mounted = [v.split(":")[1] for v in load("docker-compose.yaml")["services"]["prometheus"]["volumes"]]
    assert job["authorization"]["credentials_file"] in mounted
    (target,) = job["static_configs"][0]["targets"]
    base = yaml.safe_load((ROOT / "docker-compose.example.yaml").read_text())
    assert target == "treadle:8787" and "127.0.0.1:8787:8787" in base["services"]["treadle"]["ports"]


def exposed_series() -> set[str]:
    text = generate_latest(Metrics().registry).decode()  # type: ignore[arg-type]
    names = set(re.findall(r"^# TYPE (\S+) (\S+)", text, re.M))
    for family in DbSnapshot().collect():
        names.add((family.name, family.type))
    series = set()
    for name, kind in names:
        series |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"} if kind == "histogram" else {name}
        if kind == "counter":
            series.add(f"{name}_total" if not name.endswith("_total") else name)
    return series


def test_dashboard_queries_only_series_treadle_exposes() -> None:
    dash = json.loads((PROFILE / "grafana" / "dashboards" / "treadle.json").read_text())
    uids = {d["uid"] for d in load("grafana/provisioning/datasources/datasources.yaml")["datasources"]}
    provider = load("grafana/provisioning/dashboards/dashboards.yaml")["providers"][0]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    series = exposed_series()
    titles = []
    for panel in dash["panels"]:
        titles.append(panel["title"])
        assert panel["datasource"]["uid"] in uids
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in uids
            for name in re.findall(r"\btreadle_[a-z_]+", target.get("expr", "")):
                assert name in series, (panel["title"], name)
    for wanted in ("Run latency", "Iterations/s", "Model latency", "Tool error rate", "Queue", "Parked runs"):
        assert any(t.startswith(wanted) for t in titles), wanted
