"""``voice-agent talk``: one call on this machine's microphone and speaker.

The call runs until Ctrl-C (or ``stop``), prints what was said and each turn's
voice-to-voice time as it goes, and writes its files like any live call.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from agent.errors import UserError
from agent.live.call import Event, LiveCall, Runtime
from agent.timing.record import TurnRecord
from agent.timing.summary import ms
from agent.transports.sounddevice_io import SoundDeviceInput, SoundDeviceOutput


def import_sounddevice() -> ModuleType:
    """The sounddevice module, or one line saying why there is no sound here."""
    try:
        import sounddevice
    except ImportError:
        raise UserError(
            "no sound device support: install the mic extra (pip install 'voice-agent[mic]')"
        ) from None
    except OSError as exc:  # PortAudio itself is missing
        raise UserError(
            f"no sound device: {exc} (on Debian/Ubuntu: apt-get install libportaudio2)"
        ) from None
    return sounddevice


def console_printer(say: Callable[[str], None]) -> Callable[[Event], None]:
    """Call events as console lines: what each side said, barge-ins, each turn's timing once."""
    shown: set[int] = set()

    def emit(event: Event) -> None:
        kind = event["type"]
        if kind == "final":
            say(f"you: {event['text']}")
        elif kind == "revised":  # the words before a pause, heard again with the rest
            say(f"you (heard again): {' '.join(now for _, now in event['turns'])}")
        elif kind == "bot_text":
            say(f"bot: {event['text']}")
        elif kind == "barge_in":
            say(f"  (cut off; bot audio stopped {event['ms']} ms after you started)")
        elif kind == "turn":
            record: TurnRecord = event["record"]
            if record.voice_to_voice_ms is not None and record.turn not in shown:
                shown.add(record.turn)
                say(f"  turn {record.turn}: voice-to-voice {ms(record.voice_to_voice_ms)} ms")

    return emit


async def talk(
    runtime: Runtime,
    sd: ModuleType | Any,
    *,
    input_device: int | str | None,
    output_device: int | str | None,
    calls_dir: Path,
    record_wav: bool = True,
    stop: asyncio.Event | None = None,
    say: Callable[[str], None] = print,
) -> LiveCall:
    """Run one call on the sound card until ``stop`` is set or Ctrl-C; returns the call."""
    call = LiveCall(runtime, calls_dir, kind="talk", record_wav=record_wav,
                    emit=console_printer(say))  # fmt: skip
    transport_in = SoundDeviceInput(sd, input_device, call.clock, call.recorder, rate=call.rate)
    transport_out = SoundDeviceOutput(sd, output_device, call.clock, call.recorder,
                                      rate=call.rate)  # fmt: skip
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    try:
        loop.add_signal_handler(signal.SIGINT, stop.set)
        handles_sigint = True
    except (NotImplementedError, RuntimeError):
        handles_sigint = False
    waiter = asyncio.ensure_future(stop.wait())
    waiter.add_done_callback(lambda _: call.hang_up("stopped at the console"))
    try:
        transport_out.open()
        transport_in.open()
        say(f"talking (call {call.id}): speak, then pause; Ctrl-C hangs up. Files: {call.dir}")
        await call.run(transport_in, transport_out)
    finally:
        waiter.cancel()
        transport_in.close()
        transport_out.close()
        if handles_sigint:
            loop.remove_signal_handler(signal.SIGINT)
    return call
