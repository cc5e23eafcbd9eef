"""The CLI's errors are short and never leak: the doctor hides a malformed DATABASE_URL's password
and never creates the embedded cluster; `treadle run --url` against a server that is down says so
in two lines instead of a traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from treadle.cli.main import main

SECRET = "hunter2-not-for-print"


@pytest.mark.parametrize("url", [
    f"postgres://bob:{SECRET}@127.0.0.1:notaport/db",
    f"bob:{SECRET}@somehost/db",
    f"host=127.0.0.1 password={SECRET} port=zz",
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
    assert len(err.strip().splitlines()) == 2
