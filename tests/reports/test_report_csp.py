"""The HTML report carries a Content-Security-Policy, and what a caller said or a run folder
is named never becomes live markup in it: checked in Chromium, with the policy in force."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.settings import Settings
from agent.timing.budget import load_budget
from agent.timing.record import jsonl
from agent.timing.timeline import EVENTS
from agent.timing.turn_timer import Turn

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HOSTILE = [
    "<script>document.title='PWNED-1'</script>",
    '"><svg onload="document.title=\'PWNED-2\'">',
    "'><img src=x onerror=\"document.title='PWNED-3'\">",
]


def hostile_run(root: Path) -> Path:
    """A run folder named with markup whose turns say markup, as a live call could record."""
    run = root / "run-<img src=x onerror=\"document.title='PWNED-4'\">"
    run.mkdir()
    budget = load_budget(Settings().budget_file)
    records = []
    for number, text in enumerate(HOSTILE, start=1):
        events = {name: 1000.0 * number + 40 * i for i, name in enumerate(EVENTS)}
        events["interrupted"] = None
        turn = Turn(number, input=text, user_text=text, bot_text=text, spoken_text=text,
                    events=events, errors=[text])  # fmt: skip
        records.append(turn.record(budget))
    (run / "turns.jsonl").write_text(jsonl(records))
    return run


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `apt-get install chromium`")
def test_report_html_has_a_policy_and_no_live_markup(tmp_path):
    run = hostile_run(tmp_path)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "report", str(run), "-f", "html", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr  # 1: over budget, still written
    html = (out / "report.html").read_text()
    assert '<meta http-equiv="Content-Security-Policy"' in html
    policy = html.split('http-equiv="Content-Security-Policy" content="')[1].split('"')[0]
    assert "default-src 'none'" in policy and "'unsafe-inline'" not in policy.split(";")[1]
    browser = subprocess.run(
        [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr",
         "--v=0", "--dump-dom", str(out / "report.html")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    dom = browser.stdout
    assert browser.returncode == 0, browser.stderr[-2000:]
    assert "[ready:" in dom, "the report's own script did not run under its policy"
    assert "PWNED" not in dom.split("</title>")[0]
    assert not any(tag in dom for tag in ("<script>document", "<svg onload", "<img src"))
    console = [line for line in browser.stderr.splitlines() if ":CONSOLE" in line]
    assert not [line for line in console if "Content Security Policy" in line], console
