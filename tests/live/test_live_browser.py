"""The browser page end to end: headless Chromium with a fake microphone playing real speech.

Chromium's fake capture device plays a WAV file as the microphone; the page is opened with
``?autostart=1`` so the call starts without a click. The page logs what it shows (status,
transcript, the timing table, seconds of bot audio received) as one console line per change,
read back from its own DOM; Chromium writes console lines to stderr with
``--enable-logging=stderr``, so no remote debugging is needed to see the page.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from agent.audio import load_audio
from tests.support.clips import SAMPLES
from tests.support.live_server import serving
from tests.support.transcripts import wer

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGE_TIMEOUT_SECS = 120


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("calls")) as running:
        yield running


def test_page_is_served_over_plain_http(server):
    with urllib.request.urlopen(server.url("/", "http"), timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/html")
        page = response.read().decode()
    assert 'id="talk"' in page and "/browser" in page and "audioWorklet" in page
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(server.url("/nope", "http"), timeout=10)
    assert missing.value.code == 404


def fake_microphone(path: Path) -> Path:
    """ldc93s1 at 48 kHz, 1 s of silence before it and 12 s after (time for the answer)."""
    speech = load_audio(SAMPLES / "ldc93s1.wav", 16000).astype(np.float32) / 32768
    padded = np.concatenate([np.zeros(16000), speech, np.zeros(16000 * 12)])
    sf.write(path, soxr.resample(padded, 16000, 48000), 48000, subtype="PCM_16")
    return path


def page_states(lines: list[str]) -> list[dict]:
    """The page's console lines (``voice-agent {...}``) as dicts."""
    states = []
    for line in lines:
        start = line.find('"voice-agent {')
        if start < 0:
            continue
        end = line.rfind('}", source:')
        try:
            states.append(json.loads(line[start + len('"voice-agent ') : end + 1]))
        except json.JSONDecodeError:
            continue
    return states


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_page_talks_shows_transcript_and_timings_and_plays_bot_audio(server, tmp_path, manifest):
    wav = fake_microphone(tmp_path / "mic.wav")
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
        "--autoplay-policy=no-user-gesture-required",
        "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}",
        server.url("/?autostart=1", "http"),
    ]  # fmt: skip
    browser = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, errors="replace")  # fmt: skip
    lines: list[str] = []

    def read_log() -> None:
        for line in browser.stderr:
            lines.append(line)

    threading.Thread(target=read_log, daemon=True).start()

    def shown() -> dict | None:
        """The first page state with a timed turn and some bot audio, once there is one."""
        for state in page_states(list(lines)):
            if state["rows"] and state["rows"][0][3] != "–" and state["audio_s"] >= 0.5:
                return state
        return None

    deadline = time.monotonic() + PAGE_TIMEOUT_SECS
    try:
        while time.monotonic() < deadline and shown() is None and browser.poll() is None:
            time.sleep(0.5)
    finally:
        browser.terminate()
        try:
            browser.wait(timeout=20)
        except subprocess.TimeoutExpired:
            browser.kill()
    states = page_states(lines)
    assert states, "the page logged nothing:\n" + "\n".join(lines[-20:])
    state = shown()
    assert state is not None, f"no timed turn with bot audio on the page; last: {states[-1]}"

    assert state["status"].startswith("connected: call")
    reference = manifest["ldc93s1.wav"]["text"]
    you = [x for x in state["transcript"].splitlines() if x.startswith("you: ")]
    assert you and wer(reference, you[0][len("you: ") :]) <= 0.35, state["transcript"]
    assert any(x.startswith("bot: ") for x in state["transcript"].splitlines())
    number, user_text, bot_text, v2v, *stages, barge_in = state["rows"][0]
    assert number == "1" and wer(reference, user_text) <= 0.35 and bot_text
    assert 0 < int(v2v) < 10000 and all(s == "–" or int(s) >= 0 for s in stages)
    assert any(s.get("transcript", "").strip() and not s["transcript"].startswith("you:")
               for s in states), "no interim transcript was shown"  # fmt: skip

    # The server hung the call up when the browser went and wrote the same record.
    for _ in range(100):
        folders = server.calls("browser")
        if folders and (folders[-1] / "call.json").exists():
            break
        time.sleep(0.2)
    records = [json.loads(x) for x in (folders[-1] / "turns.jsonl").read_text().splitlines()]
    assert records[0]["user_text"] == user_text
    assert abs(records[0]["voice_to_voice_ms"] - int(v2v)) <= 1
