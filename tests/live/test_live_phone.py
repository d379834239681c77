"""The phone bridge end to end: a real server, a simulated Twilio caller, real models.

The caller streams 20 ms mu-law frames at real-time pace for the whole call, like a phone
line, so endpointing, barge-in and hang-up are exercised as they would be on a call.
"""

from __future__ import annotations

import asyncio
import json
import warnings

import numpy as np
import pytest
import soundfile as sf
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agent.audio import load_audio, speech_bounds
from agent.transports.g711 import (
    Rate2Converter,
    mulaw_decode,
    mulaw_encode,
    through_phone_line,
)
from tests.support.caller import PhoneCaller
from tests.support.clips import SAMPLES
from tests.support.live_server import serving
from tests.support.transcripts import wer

pytestmark = pytest.mark.slow

RATE = 16000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("calls")) as running:
        yield running


def clip(name: str, lead_secs: float | None = None) -> np.ndarray:
    """A sample at 16 kHz; with ``lead_secs``, only that much silence kept before the speech."""
    samples = load_audio(SAMPLES / name, RATE)
    if lead_secs is not None:
        start = speech_bounds(samples, RATE)[0]
        samples = samples[max(0, start - int(lead_secs * RATE)) :]
    return samples


def test_mulaw_codec_matches_the_g711_tables():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop  # the reference, while Python still ships it
    every_code = bytes(range(256))
    reference = np.frombuffer(audioop.ulaw2lin(every_code, 2), dtype=np.int16)
    assert np.array_equal(mulaw_decode(every_code), reference)
    ramp = np.arange(-32768, 32768, dtype=np.int64).astype(np.int16)
    ours = np.frombuffer(mulaw_encode(ramp), dtype=np.uint8).astype(int)
    theirs = np.frombuffer(audioop.lin2ulaw(ramp.tobytes(), 2), dtype=np.uint8).astype(int)
    # audioop truncates to 14 bits first, so a few negative values at segment edges land
    # one code away; everything else is identical.
    assert np.mean(ours == theirs) > 0.99 and np.abs(ours - theirs).max() <= 1


def test_8k_round_trip_keeps_the_telephone_band():
    t = np.arange(RATE) / RATE
    tone = (8000 * np.sin(2 * np.pi * 1000 * t)).astype(np.int16)
    alias = (8000 * np.sin(2 * np.pi * 6000 * t)).astype(np.int16)  # above 4 kHz: must go
    down, up = Rate2Converter(up=False), Rate2Converter(up=True)
    out = np.concatenate([up(down(tone[i : i + 320])) for i in range(0, RATE, 320)])
    lag = 2 * (len(Rate2Converter.TAPS) - 1) // 2  # both filters' delay, at 16 kHz
    err = out[lag + 1000 :].astype(float) - tone[1000 : RATE - lag].astype(float)
    assert np.sqrt(np.mean(err**2)) < 0.02 * 8000 / np.sqrt(2)
    down = Rate2Converter(up=False)
    leaked = np.concatenate([down(alias[i : i + 320]) for i in range(0, RATE, 320)])
    assert np.abs(leaked[200:]).max() < 8000 * 10 ** (-40 / 20)
    # The whole line, mu-law included, as the benchmarks replay a phone call's audio.
    rms = {name: np.sqrt(np.mean(through_phone_line(x)[800:].astype(float) ** 2)) / 8000
           for name, x in (("tone", tone), ("alias", alias))}  # fmt: skip
    assert 0.65 < rms["tone"] < 0.76  # a sine's rms is 0.707 of its peak
    assert rms["alias"] < 0.01


async def test_call_answers_is_cut_off_by_the_caller_and_hangs_up(server, manifest, settings):
    question = clip("ldc93s1.wav")
    barge_in = clip("new_home_in_the_stars.wav", lead_secs=0.1)
    barge_in_start = speech_bounds(barge_in, RATE)[0]
    async with PhoneCaller(server.url("/phone")) as phone:
        await asyncio.sleep(0.5)
        # The small LLM sometimes answers in half a second, which is over before anyone
        # could talk over it: ask again then (up to 3 times). An answer still arriving when
        # the caller's speech could be heard, with no clear, fails at once.
        for _ in range(3):
            asked = phone.speak(question)
            await asked.done.wait()
            reply = await phone.wait_for("media", asked.sent_at[-1], 40)
            assert reply is not None, "no bot audio came back"
            # Talk over the bot while its audio is arriving: the phone must be told to clear.
            interrupting = phone.speak(barge_in)
            clear = await phone.wait_for("clear", reply.at, 8)
            await interrupting.done.wait()
            spoke_at = interrupting.sent_time(barge_in_start)
            if clear is not None:
                break
            talked_over = [r for r in phone.media_after(spoke_at + 0.6)
                           if r.at < interrupting.sent_at[-1]]  # fmt: skip
            assert not talked_over, "the bot talked on over the caller and got no clear"
            # That clip was a turn of its own: let its answer play out before asking again.
            await phone.wait_for("media", interrupting.sent_at[-1], 40)
            await phone.wait_quiet(1.0, 40)
        assert clear is not None, "three answers in a row ended before they could be cut"
        assert clear.at > spoke_at, "clear came before the caller started talking"
        assert clear.at - spoke_at < 1.5, f"barge-in took {clear.at - spoke_at:.2f} s"
        # The bot's audio stopped at the caller's first speech window (a hold), before the
        # clear that confirmed the barge-in (vad_start_secs of speech later).
        before = [r for r in phone.media_after(reply.at) if r.at <= clear.at]
        assert before and clear.at - before[-1].at >= 0.08, "the bot talked until the clear"
        # While the caller goes on talking the bot stays quiet: its queued audio was dropped.
        assert not [r for r in phone.media_after(clear.at) if r.at < clear.at + 1.0]

        answer = await phone.wait_for("media", clear.at + 1.0, 40)
        assert answer is not None, "the interrupting turn got no answer"
        # Played out: a long clause after a short first sentence can leave more than a
        # second between two phrases on a loaded machine.
        assert await phone.wait_quiet(3.0, 40)
        assert await phone.hang_up(30), "the server did not close the call after stop"

    heard = phone.bot_audio()
    assert len(heard) > 8000 * 0.5 and np.sqrt(np.mean(heard.astype(float) ** 2)) > 300
    assert phone.events("mark"), "no mark after a spoken phrase"

    folder = server.calls("phone")[-1]
    records = [json.loads(x) for x in (folder / "turns.jsonl").read_text().splitlines()]
    cut = [i for i, r in enumerate(records) if r["interrupted"]]
    assert len(cut) == 1 and cut[0] == len(records) - 2, [r["interrupted"] for r in records]
    first, second = records[-2], records[-1]
    # 8 kHz telephone audio costs tiny.en some words of this clip: through the codec alone,
    # offline, it hears "She had a doc suit in Greece in Washington," (WER 0.64), so only
    # a transcript that lost the clip (WER near 1) fails here.
    assert wer(manifest["ldc93s1.wav"]["text"], first["user_text"]) <= 0.7, first["user_text"]
    assert first["voice_to_voice_ms"] > 0
    assert 0 < first["barge_in_ms"] < 1500
    home = manifest["new_home_in_the_stars.wav"]["text"]
    assert wer(home, second["user_text"]) <= 0.25, second["user_text"]
    assert second["voice_to_voice_ms"] > 0 and second["bot_text"]
    # What the caller heard: the phrases of the cut answer played whole before the barge-in.
    assert first["bot_text"].startswith(first["spoken_text"])
    assert len(first["spoken_text"]) < len(first["bot_text"])
    assert second["spoken_text"] == second["bot_text"]
    info = json.loads((folder / "call.json").read_text())
    assert info["end_reason"] == "the phone sent stop"
    assert info["stream_sid"] == phone.stream_sid and info["marks_played"] >= 1
    assert info["smart_turn_lean"] == settings.for_phone().turn.smart_turn_lean  # 8 kHz audio
    audio, rate = sf.read(folder / "call.wav", dtype="int16")
    assert rate == RATE and audio.shape[1] == 2 and np.abs(audio[:, 1]).max() > 1000
    assert (folder / "summary.json").exists()


async def test_bad_messages_cost_a_line_not_the_server(server):
    url = server.url("/phone")
    # Junk before the start, then a media format the bridge does not speak: that call ends.
    async with connect(url) as ws:
        await ws.send("this is not json")
        await ws.send(b"\x00\x01binary")
        await ws.send(json.dumps({"event": "media", "media": {"payload": "AAAA"}}))
        fmt = {"encoding": "audio/l16", "sampleRate": 16000, "channels": 1}
        await ws.send(json.dumps({"event": "start", "start": {"streamSid": "MZ1",
                                                               "mediaFormat": fmt}}))  # fmt: skip
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 15)
        assert ws.close_code == 1003
    # Junk in the middle of a call: each message is skipped, the call goes on and ends well.
    async with PhoneCaller(url) as phone:
        for junk in ("{{{", "[1, 2]", json.dumps({"event": "bogus"}),
                     json.dumps({"event": "media", "media": {"payload": "***"}}),
                     json.dumps({"event": "media", "media": {}})):  # fmt: skip
            await phone.send(junk)
        await asyncio.sleep(1.0)
        assert not phone.closed.is_set()
        assert await phone.hang_up(30)
    # The server is still there for the next caller.
    async with PhoneCaller(url) as phone:
        assert await phone.hang_up(30)
    log = "\n".join(server.stderr)
    assert "not JSON" in log and "unsupported media format" in log and "not base64" in log
    assert "Traceback" not in log


async def test_many_calls_at_once_each_get_their_own_pipeline(server):
    before = set(server.calls("phone"))
    question = clip("new_home_in_the_stars.wav")

    async def one_call() -> PhoneCaller:
        async with PhoneCaller(server.url("/phone")) as phone:
            await asyncio.sleep(0.3)
            asked = phone.speak(question)
            await asked.done.wait()
            await phone.wait_for("media", asked.sent_at[0], 60)
            await phone.wait_quiet(1.0, 60)
            assert await phone.hang_up(30)
        return phone

    phones = await asyncio.wait_for(asyncio.gather(one_call(), one_call()), 180)
    assert all(p.events("media") for p in phones), "a concurrent call got no answer"
    new = sorted(set(server.calls("phone")) - before)
    assert len(new) == 2
    for folder in new:
        written = {p.name for p in folder.iterdir()}
        assert {"turns.jsonl", "call.json", "call.wav", "summary.json"} <= written
        records = [json.loads(x) for x in (folder / "turns.jsonl").read_text().splitlines()]
        assert records and records[0]["voice_to_voice_ms"] > 0
