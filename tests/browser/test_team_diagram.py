"""A team on the web page, in a real headless Chromium against a real `treadle serve`: a live team
run's diagram is drawn as a picture (the server's SVG, rebuilt by the page from its allowed
elements) with the state the walk is in outlined, and moves to the terminal state when the run
ends; the library shows a team's picture beside its Mermaid source. No console errors (a CSP
violation is one). Skipped where no Chromium is installed."""

from __future__ import annotations

import httpx
import pytest

from tests.browser.conftest import TOKEN
from tests.support.browser import Browser, ok, wait_api
from tests.support.e2e import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def current(page: Browser, box: str) -> list[str]:
    return [str(s) for s in page.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' svg g.state.current')].map(g => g.dataset.state)", box)]


def test_a_live_team_runs_diagram_is_a_picture_with_its_state_outlined(
    page: Browser, served: ServerProcess, api: httpx.Client
) -> None:
    team = ok(api.post("/v1/runs", json={"team": "flow", "prompt": "go"}))["run_id"]

    def asking() -> str | None:
        kids = [r for r in ok(api.get("/v1/runs", params={"limit": 500}))["runs"] if r["parent_run_id"] == team
                and r["agent"] == "asker"]
        if kids and ok(api.get(f"/v1/runs/{kids[0]['run_id']}/interrupts", params={"status": "pending"}))["interrupts"]:
            return str(kids[0]["run_id"])
        return None

    asker = wait_api("the team's `ask` state to ask", asking)
    page.open(served.url, team, token=TOKEN)
    page.wait("the team's picture", lambda: page.all("#run-team-picture svg g.state"))
    # every state is drawn (a box and its name), the edges between them, the walk's state outlined
    states = page.driver.execute_script(
        "return [...document.querySelectorAll('#run-team-picture svg g.state')].map(g => g.dataset.state)")
    assert sorted(states) == ["ask", "done", "work"]
    assert page.wait("the current state outlined", lambda: current(page, "#run-team-picture")) == ["ask"]
    assert page.attr('#run-team-picture g.state.current rect', "stroke-width") == "3.5"
    assert page.attr('#run-team-picture g.state[data-state="work"] rect', "stroke-width") == "1.5"
    assert len(page.all("#run-team-picture svg path")) >= 3  # start → work → ask → done
    assert "state ask" in page.text("#run-team-state")
    # it is drawn: the browser laid the picture out at its size
    size = page.driver.execute_script(
        "const r = document.querySelector('#run-team-picture svg').getBoundingClientRect(); return [r.width, r.height]")
    assert size[0] > 150 and size[1] > 200, size
    # the Mermaid source one click away (a second request, after the picture: waited for)
    page.wait("the Mermaid source", lambda: "stateDiagram-v2" in page.text("#run-team-diagram") or None)
    # answer the question: the walk ends and the outline moves to the terminal state
    [question] = ok(api.get(f"/v1/runs/{asker}/interrupts", params={"status": "pending"}))["interrupts"]
    ok(api.post(f"/v1/runs/{asker}/interrupts/{question['interrupt_id']}/resolve", json={"answer": "yes"}))
    wait_api("the team run to complete", lambda: ok(api.get(f"/v1/runs/{team}"))["status"] == "completed")
    assert page.wait("the outline on `done`", lambda: current(page, "#run-team-picture") == ["done"] or None)


def test_the_library_shows_a_teams_picture(page: Browser, served: ServerProcess, api: httpx.Client) -> None:
    page.open(served.url, token=TOKEN)
    page.click('#tabs a[data-tab="library"]')
    page.pick("#lib-kind", "teamdef")
    page.wait("the team in the library", lambda: page.all('#lib-list [data-name="flow"]'))
    page.click('#lib-list [data-name="flow"]')
    page.wait("the team's picture", lambda: page.all("#lib-picture svg g.state"))
    assert sorted(page.attrs("#lib-picture svg g.state", "data-state")) == ["ask", "done", "work"]
    assert current(page, "#lib-picture") == []  # no run: nothing outlined
    page.wait_text("#lib-diagram", "stateDiagram-v2")
