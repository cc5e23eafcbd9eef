"""The console as a user drives it: `treadle runs | attach | answer | input | cancel | events` as
real subprocesses against a real `treadle serve`; on a pseudo-terminal (pexpect) for the live view,
the spinner, NO_COLOR and Ctrl-C (SIGINT, as the terminal sends it)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pexpect

from tests.client.served import AGENTS
from tests.support import db
from tests.support.e2e import ServerProcess, free_port, query, write_config
from treadle.client import AsyncTreadle

ANSI = re.compile(r"\x1b[\[\]()]")


def env_for(url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TREADLE_") and k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    env.update(TERM="xterm-256color", PYTHONUNBUFFERED="1", **extra)
    if url:
        env["TREADLE_URL"] = url
    return env


def treadle(url: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "treadle.cli.main", *args], env=env_for(url, **extra),
                          capture_output=True, text=True, timeout=120)


def spawn(url: str | None, *args: str, cwd: Path | None = None, **extra: str) -> pexpect.spawn:
    return pexpect.spawn(sys.executable, ["-m", "treadle.cli.main", *args], env=env_for(url, **extra),
                         encoding="utf-8", timeout=60, dimensions=(50, 200), cwd=str(cwd) if cwd else None)


def ended(child: pexpect.spawn, status: int) -> str:
    """Wait for the command to exit (with `status`); what it printed since the last expect."""
    child.expect(pexpect.EOF)
    transcript = child.before or ""
    child.close()
    assert child.exitstatus == status, transcript[-2000:]
    return transcript


async def interrupted_attach(url: str) -> tuple[str, pexpect.spawn]:
    """A run parked on its question, attached to (no colour) and sent one Ctrl-C there."""
    run_id = await waiting_run(url)
    child = spawn(url, "attach", run_id, NO_COLOR="1")
    child.expect("Which colour\\?")
    child.sendintr()
    return run_id, child


async def waiting_run(url: str, agent: str = "asker", **fields: object) -> str:
    """A run parked on its question (or, interactive, on input)."""
    async with AsyncTreadle(url) as tl:
        run_id = (await tl.runs.start(agent, "go", **fields)).run_id  # type: ignore[arg-type]
        async for ev in tl.runs.stream(run_id):
            if ev.event in ("interruption_pending", "awaiting_input"):
                return run_id
    raise AssertionError("the run never parked")


async def test_runs_lists_and_filters(server: ServerProcess) -> None:
    asker = await waiting_run(server.url, user_id="ann")
    async with AsyncTreadle(server.url) as tl:
        echo = (await tl.runs.start("echo", "hi", user_id="bob")).run_id
        await tl.runs.wait(echo)
    out = treadle(server.url, "runs")
    assert out.returncode == 0, out.stderr
    assert echo in out.stdout and asker in out.stdout and "STATUS" in out.stdout
    only_echo = treadle(server.url, "runs", "--agent", "echo").stdout
    assert echo in only_echo and asker not in only_echo
    waiting = treadle(server.url, "runs", "--status", "waiting").stdout
    assert asker in waiting and echo not in waiting and "interrupt" in waiting
    lines = [json.loads(line) for line in treadle(server.url, "runs", "--user", "bob", "--json").stdout.splitlines()]
    assert [r["run_id"] for r in lines] == [echo] and lines[0]["status"] == "completed"
    assert not ANSI.search(out.stdout), "a pipe gets no escapes"


async def test_attach_shows_the_question_and_how_to_answer_it_without_colour(server: ServerProcess) -> None:
    run_id = await waiting_run(server.url)
    child = spawn(server.url, "attach", run_id, NO_COLOR="1")
    child.expect("Which colour\\?")
    child.expect("1. red")
    child.expect("2. blue")
    child.expect(f"treadle answer {run_id}")
    listed = treadle(server.url, "answer", run_id)
    assert "Which colour?" in listed.stdout and "2. blue" in listed.stdout and "--option N" in listed.stdout
    answered = treadle(server.url, "answer", run_id, "--option", "2")
    assert answered.returncode == 0 and "resolved" in answered.stdout and "blue" in answered.stdout
    child.expect("Thanks for answering.")
    child.expect("■ done: end_turn")
    assert not ANSI.search(ended(child, 0)), "NO_COLOR: not one escape sequence"
    again = treadle(server.url, "answer", run_id)
    assert "no pending question" in again.stdout


async def test_answer_on_a_terminal_asks_for_the_answer(server: ServerProcess) -> None:
    run_id = await waiting_run(server.url)
    child = spawn(server.url, "answer", run_id, NO_COLOR="1")
    child.expect("2. blue")
    child.expect("your answer")
    child.sendline("1")
    child.expect("resolved: Which colour\\? → red")
    ended(child, 0)
    async with AsyncTreadle(server.url) as tl:
        assert (await tl.runs.wait(run_id)).status == "completed"
        [q] = (await tl.runs.interrupts(run_id)).interrupts
        assert (q.answer, q.resolved_by) == ("red", "cli")


async def test_a_terminal_gets_colour_a_spinner_and_iteration_times(server: ServerProcess) -> None:
    async with AsyncTreadle(server.url) as tl:
        run_id = (await tl.runs.start("slow", "go")).run_id
    child = spawn(server.url, "attach", run_id)
    child.expect("iteration 1 ·")  # the spinner, with the iteration's elapsed time
    child.expect("iteration 1 took")
    child.expect("done: end_turn")
    transcript = ended(child, 0)
    assert ANSI.search(transcript), "without NO_COLOR a terminal gets colour"
    plain = spawn(server.url, "attach", run_id, NO_COLOR="1")
    text = ended(plain, 0)
    assert "iteration 3 took" in text and "done: end_turn" in text and not ANSI.search(text)


async def test_json_lines_on_a_terminal_are_plain(server: ServerProcess) -> None:
    async with AsyncTreadle(server.url) as tl:
        run_id = (await tl.runs.start("echo", "hi")).run_id
        await tl.runs.wait(run_id)
    child = spawn(server.url, "attach", run_id, "--json")
    transcript = ended(child, 0)
    lines = [json.loads(line) for line in transcript.replace("\r", "").splitlines() if line]
    assert not ANSI.search(transcript)
    stored = [e["event"] for e in lines if e["id"] is not None]
    assert stored[0] == "user_input" and stored[-1] == "done"
    assert [e["id"] for e in lines if e["id"] is not None] == list(range(1, len(stored) + 1))


async def test_ctrl_c_once_detaches_and_says_how_to_attach(server: ServerProcess) -> None:
    run_id, child = await interrupted_attach(server.url)
    child.expect(f"detached: run {run_id} keeps running. Attach again: treadle attach {run_id}")
    ended(child, 130)
    async with AsyncTreadle(server.url) as tl:
        assert (await tl.runs.get(run_id)).status == "waiting"


async def test_ctrl_c_twice_cancels_the_run(server: ServerProcess) -> None:
    run_id, child = await interrupted_attach(server.url)
    child.expect("Ctrl-C again")
    child.sendintr()
    child.expect(f"cancelled run {run_id}")
    ended(child, 130)
    async with AsyncTreadle(server.url) as tl:
        assert (await tl.runs.wait(run_id)).status == "cancelled"


async def test_input_events_and_cancel_of_an_interactive_run(server: ServerProcess) -> None:
    run_id = await waiting_run(server.url, "chat", interactive=True)
    sent = treadle(server.url, "input", run_id, "second message")
    assert sent.returncode == 0 and f"delivered to run {run_id}" in sent.stdout
    async with AsyncTreadle(server.url) as tl:
        async for ev in tl.runs.stream(run_id):
            if ev.event == "text" and ev.data["text"] == "second message":
                break
    events = [json.loads(line) for line in treadle(server.url, "events", run_id, "--json").stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["text"] for e in events if e["type"] == "text"] == ["go", "second message"]
    human = treadle(server.url, "events", run_id).stdout
    assert "user_input" in human and "awaiting_input" in human
    turn = treadle(server.url, "cancel", run_id, "--turn")
    assert turn.returncode == 1 and "not_mid_turn" in turn.stderr  # it waits for input: no turn to stop
    cancelled = treadle(server.url, "cancel", run_id, "--reason", "done here")
    assert cancelled.returncode == 0 and "cancel requested" in cancelled.stdout
    async with AsyncTreadle(server.url) as tl:
        assert (await tl.runs.wait(run_id)).status == "cancelled"


def test_errors_are_one_line(server: ServerProcess) -> None:
    missing = treadle(server.url, "attach", "r_nope")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: run_not_found: run 'r_nope' not found"
    down = treadle(f"http://127.0.0.1:{free_port()}", "runs")
    assert down.returncode == 1 and len(down.stderr.strip().splitlines()) == 2 and "cannot reach" in down.stderr
    # only `treadle run` can run in this process: the others never tell you to drop --url
    assert "drop --url" not in down.stderr and "point --url (or $TREADLE_URL) at a running one" in down.stderr
    bad = treadle(server.url, "answer", "r_x", "yes", "--decline")
    assert bad.returncode == 1 and "give one of" in bad.stderr


async def test_in_process_mode_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    """`treadle run` with no server serves in-process; Ctrl-C stops that server (the process exits)
    and the run stays in the database, parked, for the next `treadle serve`."""
    admin = db.server_url()
    url = db.create_database(admin, "inproc")
    try:
        write_config(tmp_path / "treadle.yaml", AGENTS)
        child = spawn(None, "run", "asker", "go", cwd=tmp_path, NO_COLOR="1", DATABASE_URL=url,
                      TREADLE_LISTEN=f"127.0.0.1:{free_port()}", TREADLE_HOME=str(tmp_path / "home"))
        child.expect("starting one in this process")
        child.expect("Which colour\\?")
        child.sendintr()
        child.expect("stopping the in-process server")
        ended(child, 130)
        assert await query(url, "SELECT status FROM runs") == [{"status": "waiting"}]
    finally:
        db.drop_database(admin, url)


def chat(url: str, typed: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`treadle chat chat …` with `typed` on its stdin."""
    return subprocess.run([sys.executable, "-m", "treadle.cli.main", "chat", "chat", *args], input=typed,
                          env=env_for(url), capture_output=True, text=True, timeout=120)


async def test_chat_is_a_conversation_that_continues(server: ServerProcess) -> None:
    """`treadle chat AGENT`: each line is the next turn of one session; --session picks it up again."""
    first = chat(server.url, "hello there\nand then?\n\n", "--user-id", "cara")
    assert first.returncode == 0, first.stderr
    assert "chat> hello there" in first.stdout and "chat> and then?" in first.stdout, first.stdout
    sid = re.search(r"--session (s_[0-9a-f]+)", first.stdout)
    assert sid is not None, first.stdout
    again = chat(server.url, "one more\n", "--session", sid.group(1))
    assert again.returncode == 0, again.stderr
    assert "(2 turns so far)" in again.stdout and "chat> one more" in again.stdout, again.stdout
    async with AsyncTreadle(server.url) as tl:
        session = await tl.sessions.get(sid.group(1))
        assert session.run_count == 3 and session.user_id == "cara" and session.agent == "chat"
        transcript = await tl.sessions.transcript(sid.group(1))
    texts = [(e.event.model_extra or {}).get("text") for e in transcript.events if e.type == "text"]
    assert texts == ["hello there", "and then?", "one more"]
    wrong = treadle(server.url, "chat", "echo", "--session", sid.group(1))
    assert wrong.returncode == 1 and "belongs to agent chat" in wrong.stdout


async def parked_boss(url: str) -> tuple[str, str]:
    """A `boss` run parked on its sub-agent, the sub-agent parked on its question: (boss, child)."""
    async with AsyncTreadle(url) as tl:
        boss = (await tl.runs.start("boss", "delegate")).run_id
        for _ in range(400):
            kids = (await tl.runs.list(parent_run_id=boss)).runs
            if kids and (await tl.runs.interrupts(kids[0].run_id, status="pending")).interrupts:
                return boss, kids[0].run_id
            await asyncio.sleep(0.05)
    raise AssertionError("the sub-agent never asked")


async def test_describe_says_what_a_parent_waits_on_down_its_children(server: ServerProcess) -> None:
    boss, child = await parked_boss(server.url)
    out = treadle(server.url, "describe", boss, NO_COLOR="1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert boss in text and "waiting" in text and "waits on" in text
    assert f"{child} (asker): an answer to: Which colour?  [red / blue]" in text, text
    assert f'→ treadle answer {child} "your answer"' in text, text
    assert "sub-agent runs" in text and re.search(rf"└ {child} asker waiting", text), text
    as_json = json.loads(treadle(server.url, "describe", boss, "--json").stdout)
    answer = f'treadle answer {child} "your answer"'
    assert [(b["run_id"], b["command"]) for b in as_json["waits_on"]] == [(child, answer)]
    assert [(t["depth"], t["run_id"]) for t in as_json["tree"]] == [(0, boss), (1, child)]
    async with AsyncTreadle(server.url) as tl:  # answered: the boss finishes, nothing waits any more
        [q] = (await tl.runs.interrupts(child, status="pending")).interrupts
        await tl.runs.answer(child, q.interrupt_id, "red")
        await tl.runs.wait(boss)
    done = treadle(server.url, "describe", boss, NO_COLOR="1").stdout
    assert "completed" in done and "waits on" not in done and re.search(rf"└ {child} asker completed", done)
    assert treadle(server.url, "describe", "r_nope").returncode == 1


async def test_runs_filters_by_parent_and_creation_time(server: ServerProcess) -> None:
    boss, child = await parked_boss(server.url)
    kids = treadle(server.url, "runs", "--parent", boss).stdout
    assert child in kids and boss not in kids
    async with AsyncTreadle(server.url) as tl:
        old = (await tl.runs.start("echo", "long ago")).run_id
        await tl.runs.wait(old)
    import psycopg  # the row's timestamp moved, as if it ran two days ago

    with psycopg.connect(server.database_url, autocommit=True) as conn:
        conn.execute("UPDATE runs SET created_at = created_at - interval '2 days' WHERE id = %s", (old,))
    recent = treadle(server.url, "runs", "--since", "1d", "--limit", "500").stdout
    assert boss in recent and old not in recent
    older = treadle(server.url, "runs", "--until", "1d", "--limit", "500").stdout
    assert old in older and boss not in older
    window = (datetime.now(UTC) - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    assert old in treadle(server.url, "runs", "--since", window, "--until", "36h").stdout
    bad = treadle(server.url, "runs", "--since", "yesterday")
    assert bad.returncode == 2 and "an age like 30m" in bad.stderr


async def test_the_live_view_names_a_childs_question_and_leaves_parked_time_out(server: ServerProcess) -> None:
    child_proc = spawn(server.url, "run", "--url", server.url, "boss", "delegate", NO_COLOR="1")
    child_proc.expect(r"sub-agent (r_\w+) \(asker\) waits on an answer to: Which colour\?")
    kid = child_proc.match.group(1)
    child_proc.expect(f'→ treadle answer {kid} "your answer"')
    await asyncio.sleep(1.5)  # parked this long: not iteration time
    async with AsyncTreadle(server.url) as tl:
        [q] = (await tl.runs.interrupts(kid, status="pending")).interrupts
        await tl.runs.answer(kid, q.interrupt_id, "blue")
    found = child_proc.expect([r"iteration (\d+) took (\d+\.\d)s \(\+(\d+\.\d)s parked\)", pexpect.EOF])
    assert found == 0, child_proc.before
    iteration, took, parked = (float(g) for g in child_proc.match.groups())
    assert iteration == 2 and parked >= 1.5 and took < 1.5, (iteration, took, parked)
    child_proc.expect("■ done: end_turn")
    ended(child_proc, 0)
