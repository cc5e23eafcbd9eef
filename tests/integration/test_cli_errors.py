"""The CLI's errors are short and never leak: the doctor hides a malformed DATABASE_URL's password
and never creates the embedded cluster; `treadle run --url` against a server that is down says so
in two lines instead of a traceback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from treadle.cli.main import main

SECRET = "hunter2-not-for-print"


@pytest.mark.parametrize("url", [
    f"postgres://bob:{SECRET}@127.0.0.1:notaport/db",
    f"bob:{SECRET}@somehost/db",
    f"host=127.0.0.1 password={SECRET} port=zz",
    # an unencoded @ in the password (libpq splits at the first), a quoted keyword value with a
    # space, a query's password, a percent-encoded one
    f"postgres://bob:p@ss-{SECRET}@127.0.0.1:zz/db",
    f"host=127.0.0.1 password='x {SECRET}' port=zz",
    f"postgresql://127.0.0.1:zz/db?user=bob&password={SECRET}",
    f"postgresql://bob:{SECRET.replace('-', '%2D')}@127.0.0.1:zz/db",
])
def test_the_doctor_never_prints_the_databases_password(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    monkeypatch.setenv("DATABASE_URL", url)
    assert main(["doctor"]) == 1
    out = capsys.readouterr()
    assert "FAIL database" in out.out
    assert SECRET not in out.out + out.err


def test_the_doctor_does_not_create_the_embedded_database(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("TREADLE_HOME", str(tmp_path / "home"))
    assert main(["init"]) == 0
    assert main(["doctor"]) == 0
    assert "WARN no database yet" in capsys.readouterr().out
    assert not (tmp_path / "home" / "pg").exists()


def test_run_against_a_server_that_is_down_is_two_lines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    assert main(["run", "--url", f"http://127.0.0.1:{port}", "demo", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot reach http://127.0.0.1:{port}") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 2 and "drop --url to run in this process" in err
    # the server named by the environment instead: the hint says what to unset (not a --url never given)
    monkeypatch.setenv("TREADLE_URL", f"http://127.0.0.1:{port}")
    assert main(["run", "demo", "hi"]) == 1
    err = capsys.readouterr().err
    assert "unset TREADLE_URL to run in this process" in err and "--url" not in err


def test_serve_on_a_taken_port_fails_before_it_announces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--listen", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}: cannot listen there" in err and "serving on" not in err


def _serve(tmp_path: Path, n: int, **extra_env: str) -> tuple[subprocess.Popen[bytes], Path]:
    """`treadle serve` on the embedded Postgres of tmp_path/home, up (its /healthz answers)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("TREADLE_")}
    env["TREADLE_HOME"] = str(tmp_path / "home")
    env.update(extra_env)
    log = tmp_path / f"serve-{n}.log"
    with log.open("wb") as err:  # the child holds its own descriptor
        proc = subprocess.Popen([sys.executable, "-m", "treadle.cli.main", "serve", "--listen", f"127.0.0.1:{port}"],
                                cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc, log
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, \
            f"treadle serve did not come up:\n{log.read_text()[-2000:]}"
        time.sleep(0.2)


def _stop_left_postgres(tmp_path: Path, *procs: subprocess.Popen[bytes]) -> None:
    """Never leave a server or a Postgres behind, even when the test failed."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = tmp_path / "home" / "pg" / "postmaster.pid"
    if left.exists():
        os.kill(int(left.read_text().split()[0]), signal.SIGTERM)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_server_stops_its_embedded_postgres(tmp_path: Path, sig: signal.Signals) -> None:
    """SIGTERM (kill, systemd, Docker) and SIGINT (Ctrl-C) both shut treadle down and stop the
    embedded Postgres it started (its postmaster.pid is gone)."""
    subprocess.run([sys.executable, "-m", "treadle.cli.main", "init"], cwd=tmp_path, check=True, capture_output=True)
    proc, _ = _serve(tmp_path, 1)
    try:
        pid_file = tmp_path / "home" / "pg" / "postmaster.pid"
        assert pid_file.exists()  # the embedded Postgres runs
        proc.send_signal(sig)
        proc.wait(timeout=60)
        assert not pid_file.exists(), "the embedded Postgres outlived treadle"
    finally:
        _stop_left_postgres(tmp_path, proc)


def test_a_clean_stop_after_a_kill9_still_stops_the_embedded_postgres(tmp_path: Path) -> None:
    """A SIGKILLed treadle leaves the embedded Postgres running (the next start reuses it) and its
    pid in pgserver's list of users; the next clean stop is the last user all the same."""
    subprocess.run([sys.executable, "-m", "treadle.cli.main", "init"], cwd=tmp_path, check=True, capture_output=True)
    first, _ = _serve(tmp_path, 1)
    second: subprocess.Popen[bytes] | None = None
    try:
        first.kill()
        first.wait(timeout=60)
        pid_file = tmp_path / "home" / "pg" / "postmaster.pid"
        assert pid_file.exists()  # it survived the crash, as it should
        second, _ = _serve(tmp_path, 2)
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=60)
        assert not pid_file.exists(), "a stale pid kept the embedded Postgres running past the last clean stop"
    finally:
        _stop_left_postgres(tmp_path, first, *([second] if second else []))


@pytest.mark.parametrize(("level", "uvicorn_lines"), [("warning", False), ("info", True)])
def test_the_servers_own_lines_follow_treadle_log_level(tmp_path: Path, level: str, uvicorn_lines: bool) -> None:
    """uvicorn's start-up lines ("Started server process", "Application startup complete") are
    INFO: at TREADLE_LOG_LEVEL=warning (the demo's) they are not printed, at info they are."""
    subprocess.run([sys.executable, "-m", "treadle.cli.main", "init"], cwd=tmp_path, check=True, capture_output=True)
    proc, log = _serve(tmp_path, 1, TREADLE_LOG_LEVEL=level)
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        text = log.read_text()
        assert "serving on" in text, text
        assert ("Application startup complete" in text) is uvicorn_lines, text
    finally:
        _stop_left_postgres(tmp_path, proc)
