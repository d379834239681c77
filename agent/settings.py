"""All settings in one typed object.

Precedence, highest first: CLI flags (passed as init values), environment variables
(``VOICE_AGENT_...``, nested with ``__``, e.g. ``VOICE_AGENT_LLM__BASE_URL``), a YAML config
file (``--config`` or ``VOICE_AGENT_CONFIG``), then the defaults, which work offline.
"""

from __future__ import annotations

import json
import os
from contextvars import ContextVar
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ByteSize,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from agent.errors import UserError
from agent.timing.budget import default_budget_file
from agent.yaml_file import read_yaml

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# Marks a tuning knob (``Field(json_schema_extra=KNOB)``): a threshold whose default was chosen
# by measuring the corpus (docs/eval.md, docs/decisions.md), where a change trades one kind of
# error for another; `voice-agent config --explain` and docs/settings.md say which they are.
KNOB: dict[str, Any] = {"knob": True}


def _default_persona() -> dict[str, Any]:
    """The persona shipped in the package (agent/personas/default.yaml): its texts are edited
    as prose there, and a config file's ``llm:`` section overrides any of them."""
    path = Path(str(resources.files("agent").joinpath("personas", "default.yaml")))
    return read_yaml(path, "persona file")


PERSONA = _default_persona()


def _default_models_dir() -> Path:
    """The checkout's models/ folder when running from a checkout, else a per-user cache."""
    if (PROJECT_ROOT / "pyproject.toml").exists():
        return PROJECT_ROOT / "models"
    return Path.home() / ".cache" / "voice-agent" / "models"


class ASRSettings(BaseModel):
    """Streaming speech recognition (faster-whisper / CTranslate2)."""

    model: str = Field(
        "whisper-tiny.en",
        description="a default model name (whisper-tiny.en, whisper-base) or a CTranslate2 dir",
    )
    language: str | None = Field(
        "en",
        description="the language a multilingual Whisper model is told it hears (an ISO code), "
        "so no pass spends time guessing it; an .en model hears English only",
    )
    compute_type: str = Field(
        "int8",
        description="CTranslate2's number type for the weights (int8, float16, float32): "
        "int8 keeps a CPU's passes fast",
    )
    threads: int = Field(
        1,
        ge=1,
        description="CTranslate2 threads; each decoding step is too small to share, and a "
        "second thread waits on the other stages' cores at the pause (docs/decisions.md)",
    )
    interim_interval_ms: int = Field(
        300,
        ge=100,
        json_schema_extra=KNOB,
        description="run a pass every N ms of new speech, so the LLM prefills the words while "
        "the caller is still speaking",
    )
    pre_roll_ms: int = Field(
        600,
        ge=0,
        description="audio kept from before the VAD hears a voice start, so a soft first "
        "sound is heard too",
    )
    min_window_secs: float = Field(
        10.0,
        json_schema_extra=KNOB,
        ge=0,
        le=30,
        description="each pass reads at least this many seconds (speech, then zeros): on a "
        "window barely longer than the speech Whisper mishears more",
    )
    context_gap_secs: float | None = Field(
        2.0,
        json_schema_extra=KNOB,
        ge=0,
        description="a turn that opens within this many seconds of the caller's previous one, "
        "with no answer heard to its end between, is heard after it (its audio and words), as "
        "the same sentence going on; null: every turn alone",
    )
    short_turn_secs: float | None = Field(
        1.4,
        ge=0,
        json_schema_extra=KNOB,
        description="a turn this short at its end (past the pre-roll) is a word or two: its "
        "pause pass reads the whole tail after the VAD's pause (not the lull's pass, which "
        "can clip a soft last consonant) with beam search (cheap on a few tokens; on "
        "sentences it costs more and measured no better); null: no special case",
    )


class TurnSettings(BaseModel):
    """Voice activity and end-of-turn detection."""

    vad_start_secs: float = Field(
        0.15,
        ge=0.02,
        json_schema_extra=KNOB,
        description="voice the VAD must hear this long before it says speech started (a turn "
        "opens), so a click opens nothing",
    )
    vad_stop_secs: float = Field(
        0.15,
        ge=0.05,
        json_schema_extra=KNOB,
        description="silence before the VAD says speech 'stops', where the turn's end is "
        "judged again",
    )
    vad_confidence: float = Field(
        0.6,
        gt=0,
        lt=1,
        description="Silero's probability of speech from which a window is voice: what tells "
        "a voice from steady noise",
    )
    vad_min_volume: float = Field(
        0.3,
        json_schema_extra=KNOB,
        ge=0,
        lt=1,
        description="smoothed loudness (0: -110 LUFS, 1: -10 LUFS) a voice must also reach; "
        "Silero's confidence tells speech from noise, this keeps far-off voices out",
    )
    hold_on_speech: bool = Field(
        True,
        description="stop sending bot audio at the caller's first speech window, before the "
        "barge-in is confirmed (vad_start_secs); resume if it is not",
    )
    hold_onset_db: float | None = Field(
        10.0,
        gt=0,
        description="also hold the bot's audio at a sound this many dB over the line's noise "
        "floor, before Silero hears a voice in it (null: at Silero's first voiced window)",
    )
    barge_in_secs: float = Field(
        0.4,
        json_schema_extra=KNOB,
        ge=0,
        description="voice over the bot this long interrupts it (shorter: a backchannel or a "
        "cough, which only holds its audio); counted from the voice's start",
    )
    backchannel_max_secs: float | None = Field(
        1.0,
        json_schema_extra=KNOB,
        gt=0,
        description="a voice over the bot whose words only acknowledge it ('mm-hmm', 'yeah', "
        "'okay') leaves the answer going unless it lasts this long; null: no word check, "
        "barge_in_secs of voice interrupts",
    )
    hold_release_secs: float = Field(
        0.25, gt=0, description="quiet after an unconfirmed speech window that resumes the bot"
    )
    lull_pass_ms: int | None = Field(
        60,
        json_schema_extra=KNOB,
        ge=20,
        description="run a recognition pass once the line has been quiet (within 10 dB of its "
        "noise floor) this long while the VAD still hears a voice, so the transcript is ready "
        "when the VAD pauses (null: passes on their cadence and at the VAD's pause only)",
    )
    smart_turn: bool = Field(True, description="ask Smart Turn v3 whether the turn is complete")
    smart_turn_sure: float = Field(
        0.9,
        json_schema_extra=KNOB,
        ge=0,
        le=1,
        description="Smart Turn probability that ends the turn at the stop window (the bar "
        "falls from here to smart_turn_lean as the silence grows; benchmarks/eot_sweep.py)",
    )
    smart_turn_lean: float = Field(
        0.7,
        ge=0,
        le=1,
        json_schema_extra=KNOB,
        description="the bar once the silence reaches patience_secs",
    )
    patience_secs: float = Field(
        0.6,
        gt=0,
        json_schema_extra=KNOB,
        description="silence by which the bar has fallen to smart_turn_lean",
    )
    text_credit: float = Field(
        0.2,
        json_schema_extra=KNOB,
        ge=0,
        le=1,
        description="how far the bar drops when recognition's words so far end a sentence",
    )
    words_unfinished_below: float | None = Field(
        0.05,
        json_schema_extra=KNOB,
        ge=0,
        le=1,
        description="the LLM's probability that the caller's message ends after their words "
        "so far (its end-of-message token or a closing mark next, judged at each pause), "
        "under which words of two or more end no turn before patience_secs; null: not asked "
        "(benchmarks/eot_sweep.py)",
    )
    punctuation_goes_on_above: float | None = Field(
        0.05,
        json_schema_extra=KNOB,
        ge=0,
        le=1,
        description="recognition's probability of a comma (dash, ellipsis) where it closed the "
        "caller's words with a full stop, from which words of two or more end no turn before "
        "patience_secs, like words the LLM hears going on; null: not asked "
        "(benchmarks/eot_sweep.py)",
    )
    unclosed_words_go_on: bool = Field(
        True,
        description="words of two or more that recognition did not close as a sentence (they "
        "end on a comma, a dash or no mark at all) end no turn before patience_secs, like words "
        "the LLM hears going on (benchmarks/eot_sweep.py)",
    )
    one_word_secs: float | None = Field(
        0.45,
        json_schema_extra=KNOB,
        gt=0,
        description="silence after which a single word that recognition closes as a sentence "
        '("Stop.", "Go."; not an opener, not a number) ends the turn whatever Smart Turn says, '
        "which hears too little in one word; null: Smart Turn decides",
    )
    words_finished_above: float | None = Field(
        0.1,
        json_schema_extra=KNOB,
        ge=0,
        le=1,
        description="the LLM's probability that the caller's message ends after words that "
        "end a sentence, from which they end the turn after words_finished_secs whatever "
        "Smart Turn says; null: Smart Turn decides (benchmarks/eot_sweep.py)",
    )
    words_finished_secs: float | None = Field(
        0.9,
        json_schema_extra=KNOB,
        gt=0,
        description="silence after which words the LLM takes as finished "
        "(words_finished_above) end the turn, at the first of the detector's judgements "
        "(agent.turns.detector.REJUDGE_SECS) that reaches it; None: Smart Turn decides",
    )
    phone_smart_turn_lean: float | None = Field(
        None,
        json_schema_extra=KNOB,
        ge=0,
        le=1,
        description="smart_turn_lean on phone calls, where Smart Turn (trained on wideband "
        "speech) may hear a finished sentence as less finished; null: the same as on "
        "wideband (benchmarks/eot_sweep.py --line phone)",
    )
    narrowband_vad: bool = Field(
        False,
        description="Silero's 8 kHz model hears each window too (every second sample: for a "
        "line with nothing over 4 kHz) and the more confident of the two counts",
    )
    phone_narrowband_vad: bool = Field(
        True,
        description="narrowband_vad on phone calls: the 16 kHz model alone hears pauses in "
        "telephone speech that the caller did not make, the 8 kHz one alone misses quiet words",
    )
    max_silence_secs: float = Field(
        1.5,
        gt=0,
        json_schema_extra=KNOB,
        description="silence after which the turn ends whatever the detector says",
    )
    continuation_secs: float | None = Field(
        2.0,
        json_schema_extra=KNOB,
        ge=0,
        description="a turn whose speech starts within this many seconds of the caller's "
        "previous turn's end, with no answer heard to its end between, goes on from it: Smart "
        "Turn hears both (at most its 8 s); null: each turn alone",
    )


class Example(BaseModel):
    """One example exchange: what a caller says and the answer the bot should give."""

    caller: str = Field(min_length=1)
    answer: str = Field(min_length=1)


class LLMSettings(BaseModel):
    """The language model, the engine that serves it and the persona (whose defaults are
    agent/personas/default.yaml)."""

    engine: Literal["llama-inprocess", "llama-server", "openai", "vllm"] = Field(
        "llama-inprocess",
        description="llama-inprocess: llama.cpp inside the agent (fastest here); "
        "llama-server: the agent starts llama.cpp's OpenAI server on loopback; "
        "openai: any OpenAI-compatible base_url (vLLM, another server); "
        "vllm: the agent starts vLLM's OpenAI server on loopback (model: a default name, "
        "converted by scripts/setup_vllm.sh, a safetensors folder or a hub id)",
    )
    model: str = Field(
        "qwen2.5-coder-0.5b",
        description="default model name or GGUF path; for openai, the model id",
    )
    base_url: str | None = Field(None, description="OpenAI-compatible URL (engine=openai)")
    base_url_server: Literal["llama-server", "vllm"] | None = Field(
        None,
        description="engine=openai: what serves base_url, for the option only it takes "
        "(llama-server: repeat_penalty, vllm: repetition_penalty); null: a plain OpenAI API",
    )
    fallback_url: str | None = Field(
        None,
        description="a second OpenAI-compatible URL: answers go there when the engine fails",
    )
    fallback_model: str | None = Field(None, description="model id at fallback_url (default: same)")
    api_key: SecretStr = Field(
        SecretStr("not-needed"), description="the OpenAI-compatible server's key (a secret)"
    )
    threads: int = Field(
        2,
        ge=1,
        description="llama.cpp threads (in process or in the server the agent starts): the "
        "other stages need the rest of the cores",
    )
    server_slots: int | None = Field(
        None,
        ge=1,
        description="answers the llama.cpp server the agent starts decodes at once: 1, "
        "llama-cpp-python's server (one at a time); more, llama.cpp's own llama-server "
        "(continuous batching; installed by scripts/setup.sh --pool); null: in voice-agent "
        "pool one per call it admits where llama-server is installed, else 1",
    )
    context_size: int = Field(
        2048,
        ge=256,
        description="tokens the engine keeps room for (prompt, history and answer): more "
        "costs memory, fewer cuts a long call's history",
    )
    max_tokens: int = Field(48, ge=1, description="spoken answers are short")
    max_sentences: int = Field(
        2, ge=1, description="the answer stops at the end of this sentence (streamed, cut early)"
    )
    temperature: float = Field(
        0.0, ge=0, description="0: greedy decoding, the same answer to the same conversation"
    )
    seed: int | None = Field(
        0,
        description="sampling seed of every request, so the same words get the same answer "
        "when sampling (temperature > 0, the editor's second try); null: random",
    )
    repeat_penalty: float = Field(
        1.1,
        json_schema_extra=KNOB,
        gt=0,
        description="llama.cpp repeat_penalty / vLLM repetition_penalty (1: off); sent to the "
        "engines whose API has it (docs/conversation.md compares the penalties)",
    )
    presence_penalty: float = Field(0.0, ge=-2, le=2, description="OpenAI presence_penalty")
    frequency_penalty: float = Field(0.0, ge=-2, le=2, description="OpenAI frequency_penalty")
    history_turns: int = Field(4, ge=0, description="user/assistant pairs kept in the prompt")
    bot_name: str = Field(
        PERSONA["bot_name"], description="the bot's name; {bot_name} in the texts below"
    )
    system_prompt: str = Field(
        PERSONA["system_prompt"],
        description="static instructions, sent first and byte-identical every turn",
    )
    examples: list[Example] = Field(
        [Example(**example) for example in PERSONA["examples"]],
        description="example exchanges sent after the system prompt, as if earlier in the "
        "call (static, so cached with it); the bot never says their lines itself; [] none",
    )
    greeting: str = Field(
        PERSONA["greeting"],
        description="spoken first when a live call starts (replay: --greeting); '' none",
    )
    fallback_lines: list[str] = Field(
        PERSONA["fallback_lines"],
        min_length=1,
        validation_alias=AliasChoices("fallback_lines", "fallback_line"),
        description="spoken when the engine fails or has nothing new to say: the first not "
        "yet said in the call (one line or a list; fallback_line is the same setting)",
    )
    acknowledgement_lines: list[str] = Field(
        PERSONA["acknowledgement_lines"],
        min_length=1,
        description="spoken when the model has nothing new to say to a caller's statement "
        "(a question gets a fallback line): the first not yet said in the call",
    )
    retry_note: str = Field(
        PERSONA["retry_note"],
        description="an instruction after the caller's words when an answer is asked again "
        "because it had nothing new to say ('' none; the second try also samples)",
    )
    timeout_secs: float = Field(
        8.0, gt=0, description="an engine silent this long (first token or between tokens) failed"
    )
    keepalive_secs: float = Field(
        20.0, ge=0, description="ping the engine when idle so its pages stay warm; 0 disables"
    )
    speculate: bool = Field(
        True, description="start the answer on the pause transcript, before the turn ends"
    )
    pause_for_first_phrase: bool = Field(
        True, description="stop decoding while the first phrase is synthesised (in-process)"
    )
    prefill_while_speaking: bool = Field(
        True, description="prefill each interim transcript, so the turn's end prefills little"
    )
    vllm_python: Path = Field(
        PROJECT_ROOT / ".venv-vllm" / "bin" / "python",
        description="python with vLLM installed (engine=vllm; scripts/setup_vllm.sh makes it)",
    )
    vllm_gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="engine=vllm on a GPU: share of GPU memory vLLM takes"
    )
    vllm_quantization: str | None = Field(
        None, description="engine=vllm on a GPU: --quantization (e.g. awq_marlin); null: auto"
    )

    @model_validator(mode="after")
    def _name_the_bot(self) -> LLMSettings:
        """Put the bot's name in the persona texts once, so every request sends the same bytes."""

        def named(text: str) -> str:
            return text.replace("{bot_name}", self.bot_name)

        for name in ("system_prompt", "greeting"):
            object.__setattr__(self, name, named(getattr(self, name)))
        for name in ("fallback_lines", "acknowledgement_lines"):
            object.__setattr__(self, name, [named(x) for x in getattr(self, name)])
        examples = [Example(caller=named(e.caller), answer=named(e.answer)) for e in self.examples]
        object.__setattr__(self, "examples", examples)
        return self

    @property
    def set_lines(self) -> list[str]:
        """The lines the bot says in place of the model's answer: never shown to the model
        as its own, and what the benchmarks count as a fallback."""
        return [*self.fallback_lines, *self.acknowledgement_lines]

    @property
    def opening(self) -> list[dict[str, str]]:
        """The static start of every request: the system prompt, then the examples."""
        messages = [{"role": "system", "content": self.system_prompt}]
        for example in self.examples:
            messages += [
                {"role": "user", "content": example.caller},
                {"role": "assistant", "content": example.answer},
            ]
        return messages

    @field_validator("fallback_lines", mode="before")
    @classmethod
    def _one_line_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class TTSSettings(BaseModel):
    """Phrase chunking and Piper synthesis."""

    voice: str = Field("piper-joe-medium", description="default voice name or a Piper .onnx")
    first_phrase_min_words: int = Field(
        2,
        ge=1,
        description="words the first phrase waits for before it is synthesised: fewer starts "
        "the bot's voice sooner (benchmarks/tts.py)",
    )
    phrase_min_words: int = Field(
        6,
        ge=1,
        description="words each later phrase gathers, so Piper reads whole clauses with their "
        "intonation while the one before is playing",
    )
    length_scale: float = Field(
        1.0, gt=0, description="Piper's speaking pace: over 1 slower, under 1 faster"
    )
    noise_w_scale: float | None = Field(
        None,
        ge=0,
        description="Piper's random phoneme-length variation (null: the voice's own); 0 makes "
        "every phrase the same length each time (compute-paced replays use 0)",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="onnxruntime intra-op threads for Piper; null: onnxruntime's own default "
        "(one per physical core)",
    )
    guard: bool = Field(False, description="check each phrase before it is spoken")
    guard_block_list: list[str] = Field(
        default_factory=list, description="words or phrases the bot must never say"
    )
    guard_checker: str | None = Field(
        None, description="custom check, 'module:function' taking the recent text -> bool"
    )
    guard_window_phrases: int = Field(3, ge=1, description="phrases the check sees at once")
    guard_replacement: str = Field(
        "Sorry, I can't talk about that.",
        description="said in place of a phrase the check refuses",
    )


class ServeSettings(BaseModel):
    """Who may call ``voice-agent serve`` and how many at once (docs/security.md).

    Environment: ``VOICE_AGENT_SERVE__TOKEN`` (the older ``VOICE_AGENT_SERVE_TOKEN`` spelling,
    and a flat ``serve_token`` key in the config file, still work).
    """

    # SecretStr: `voice-agent config` and any repr print it as '**********'.
    token: SecretStr | None = Field(
        None,
        description="shared secret every `serve` connection must present ('Authorization: "
        "Bearer', the /phone/<token> path or the start message's token parameter); required "
        "when serving on a non-loopback address",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="browser origins allowed on /browser besides the server's own",
    )
    max_calls: int = Field(8, ge=1, description="calls served at once; more get HTTP 503")
    max_call_secs: float = Field(
        1800.0, gt=0, description="a live call is ended (files written) after this long"
    )
    max_calls_per_address: int = Field(
        4,
        ge=1,
        description="calls at once from one client address (Twilio-signed calls "
        "are not counted); more get HTTP 503",
    )
    max_pending: int = Field(
        8,
        ge=1,
        description="/phone connections without a token waiting for it in their start "
        "message, at once (max_calls_per_address of them per address); a pool of their own, "
        "so they never keep a caller with a token out; more get HTTP 503",
    )
    drain_secs: float = Field(
        60.0,
        ge=0,
        description="on SIGTERM, calls in progress may go on this long (no new call is "
        "taken; /readyz says 503); then they are hung up and the server exits",
    )
    no_media_secs: float = Field(
        5.0, gt=0, description="a live call whose client sends no audio this long is hung up"
    )
    public_url: str | None = Field(
        None,
        description="the public base URL callers reach the server at (e.g. "
        "wss://voice.example.com, the proxy's address): signs Twilio's requests, names the "
        "page's origin; a token or a Twilio auth token is then required",
    )
    twilio_auth_token: SecretStr | None = Field(
        None,
        description="your Twilio auth token: /phone upgrades signed with it "
        "(X-Twilio-Signature over public_url) need no serve token",
    )


class RetentionSettings(BaseModel):
    """How much of ``calls/`` is kept (``agent.live.retention``).

    Environment: ``VOICE_AGENT_RETENTION__MAX_BYTES`` (the older ``VOICE_AGENT_CALLS_MAX_BYTES``
    spelling, and a flat ``calls_max_bytes`` key in the config file, still work).
    """

    max_bytes: ByteSize | None = Field(
        ByteSize(5 * 1024**3), description="oldest call folders go once calls/ is larger"
    )
    max_count: int | None = Field(10000, ge=1, description="oldest call folders go past this many")
    max_age_days: float | None = Field(
        30.0, gt=0, description="call folders older than this are removed"
    )
    min_free_bytes: ByteSize = Field(
        ByteSize(512 * 1024**2),
        description="calls are not recorded (call.wav) with less "
        "free disk space than this; the call still goes on",
    )


# The flat names these groups had before (``serve_token``, ``calls_max_bytes``): still read
# from the environment (``VOICE_AGENT_SERVE__TOKEN``) and the config file.
LEGACY_PREFIXES: dict[str, tuple[str, type[BaseModel]]] = {
    "serve": ("serve_", ServeSettings),
    "retention": ("calls_", RetentionSettings),
}


def nest_legacy(flat: dict[str, Any]) -> dict[str, Any]:
    """Settings with the groups' old flat names (``serve_token``) moved into their group;
    where both are given, the group's own name wins."""
    data = dict(flat)
    for group, (prefix, model) in LEGACY_PREFIXES.items():
        old = [k for k in data if k.startswith(prefix) and k[len(prefix) :] in model.model_fields]
        moved = {key[len(prefix) :]: data.pop(key) for key in old}
        if moved:
            given = data.get(group)
            data[group] = {**moved, **given} if isinstance(given, dict) else given or moved
    return data


FILLER_LINES = ("Let me check that for you.", "One moment while I look that up.")
TOOL_ERROR = "The {name} system could not be reached; tell the caller you could not do it now."


class ToolSpec(BaseModel):
    """One tool the model may call: what it is told, and what runs it."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the function name")
    description: str = Field(min_length=1, description="what the tool does, for the model")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON schema of the arguments (an object); it also constrains decoding",
    )
    python: str | None = Field(
        None, description="'module:function' called with the arguments (sync or async)"
    )
    url: str | None = Field(None, description="HTTP endpoint the arguments are POSTed to as JSON")
    auth_header: str = Field("Authorization", description="the header auth_env's value goes in")
    auth_env: str | None = Field(
        None, description="environment variable holding the auth header's value (a secret)"
    )
    timeout_secs: float = Field(5.0, gt=0, description="a tool that takes longer failed")
    side_effect: bool = Field(
        False,
        description="it changes something (a booking): run once per call for the same "
        "arguments, whatever turn asks, and never on a turn not yet confirmed",
    )
    error_message: str = Field(
        TOOL_ERROR, description="what the model is told when the tool fails ({name})"
    )

    @model_validator(mode="after")
    def _one_implementation(self) -> ToolSpec:
        if (self.python is None) == (self.url is None):
            raise ValueError(f"tool {self.name}: give exactly one of python or url")
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name}: parameters must be a JSON schema of an object")
        return self


class ToolsSettings(BaseModel):
    """Tools the model calls inside a turn, and the documents it may read."""

    functions: list[ToolSpec] = Field(default_factory=list, description="the declared tools")
    filler_after_ms: int | None = Field(
        700,
        ge=0,
        description="a tool that has not answered this long gets a filler line said to the "
        "caller while it works; null: none",
    )
    filler_lines: list[str] = Field(
        list(FILLER_LINES), min_length=1, description="the filler, in turn"
    )
    max_rounds: int = Field(
        2, ge=1, description="model -> tools -> model rounds in one turn before it must answer"
    )
    today: str | None = Field(
        None,
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="the date {today} in the system prompt stands for (YYYY-MM-DD); null: "
        "the call's own date",
    )
    knowledge_dir: Path | None = Field(
        None,
        description="folder of .md/.txt documents indexed at start (SQLite FTS5); the best "
        "passages for the caller's words go into the prompt",
    )
    knowledge_passages: int = Field(2, ge=1, description="passages put in the prompt per turn")

    @model_validator(mode="after")
    def _unique_names(self) -> ToolsSettings:
        names = [f.name for f in self.functions]
        if len(names) != len(set(names)):
            raise ValueError("two tools have the same name")
        return self

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """The tools in the OpenAI ``tools`` format (what chat templates take too)."""
        return [
            {"type": "function", "function": {"name": f.name, "description": f.description,
                                              "parameters": f.parameters}}
            for f in self.functions
        ]  # fmt: skip


class Settings(BaseSettings):
    """Effective settings of one agent process."""

    model_config = SettingsConfigDict(
        env_prefix="VOICE_AGENT_",
        env_nested_delimiter="__",
        env_parse_none_str="null",  # VOICE_AGENT_TURN__LULL_PASS_MS=null turns an option off
        extra="forbid",
        populate_by_name=True,
    )

    models_dir: Path = Field(
        default_factory=_default_models_dir,
        validation_alias=AliasChoices("models_dir", "VOICE_AGENT_MODELS"),
        description="where `models pull` puts the models and the agent finds them: the "
        "checkout's models/, or ~/.cache/voice-agent/models for an installed package",
    )
    budget_file: Path = Field(
        default_factory=default_budget_file,
        description="latency budget YAML (default: the one shipped in the package)",
    )
    budget_profile: str | None = Field(
        None, description="the budget file's profile to check against; null: its `default`"
    )
    sample_rate: int = Field(16000, description="pipeline audio rate (input and output)")
    asr: ASRSettings = ASRSettings()
    turn: TurnSettings = TurnSettings()
    llm: LLMSettings = LLMSettings()
    tts: TTSSettings = TTSSettings()
    tools: ToolsSettings = ToolsSettings()
    report_every_turns: int = Field(
        5,
        ge=0,
        description="log a rolling latency summary every N finished turns of a live "
        "call; 0 disables",
    )
    otel_endpoint: str | None = Field(
        None,
        description="OTLP/HTTP collector base URL (e.g. http://127.0.0.1:4318): export "
        "each turn and its stages as OpenTelemetry spans; unset disables",
    )

    serve: ServeSettings = ServeSettings()
    retention: RetentionSettings = RetentionSettings()

    def for_phone(self) -> Settings:
        """These settings for a phone call's audio (8 kHz: see ``phone_smart_turn_lean`` and
        ``phone_narrowband_vad``)."""
        turn = self.turn
        update: dict[str, Any] = {}
        if turn.phone_smart_turn_lean is not None:
            update["smart_turn_lean"] = turn.phone_smart_turn_lean
        if turn.phone_narrowband_vad:
            update["narrowband_vad"] = True
        if not update:
            return self
        return self.model_copy(update={"turn": turn.model_copy(update=update)})

    @field_validator("models_dir", "budget_file", mode="after")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            _LegacyEnvSource(settings_cls),
            _ConfigFileSource(settings_cls),
        )


class _LegacyEnvSource(PydanticBaseSettingsSource):
    """The groups' old environment names (``VOICE_AGENT_SERVE_TOKEN``,
    ``VOICE_AGENT_CALLS_MAX_BYTES``), under the new ones (``VOICE_AGENT_SERVE__TOKEN``)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        flat: dict[str, Any] = {}
        for prefix, model in LEGACY_PREFIXES.values():
            for name in model.model_fields:
                value = os.environ.get(f"VOICE_AGENT_{prefix}{name}".upper())
                if value is not None:  # a list comes as JSON, as pydantic-settings reads it
                    parsed = json.loads(value) if value.startswith("[") else value
                    flat[prefix + name] = None if value == "null" else parsed
        return nest_legacy(flat)


# The config file ``load_settings`` was given, for the one Settings it builds: passed down
# to the source, never through os.environ, so one command's --config leaks into nothing else.
_CONFIG_FILE: ContextVar[Path | None] = ContextVar("config_file", default=None)


class _ConfigFileSource(PydanticBaseSettingsSource):
    """Values from the YAML file given to ``load_settings`` (``--config``), or else the one
    VOICE_AGENT_CONFIG names."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = _CONFIG_FILE.get() or os.environ.get("VOICE_AGENT_CONFIG")
        if not path:
            return {}
        return nest_legacy(read_config_file(Path(path)))


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a YAML config file, turning every problem into one clear line."""
    if not path.is_file():
        raise UserError(f"config file {path} not found: pass an existing YAML file to --config")
    data = read_yaml(path, "config file") or {}
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a mapping of settings")
    return data


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Build the settings, reporting validation errors as one line each."""
    token = _CONFIG_FILE.set(config)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise UserError(
            f"bad settings ({problems}): fix the config file, environment or flag"
        ) from None
    except SettingsError as exc:  # an environment value that should be JSON and is not
        raise UserError(
            f"bad settings ({exc}): a list or mapping in an environment variable is written "
            """as JSON, e.g. VOICE_AGENT_LLM__FALLBACK_LINES='["Sorry?"]'"""
        ) from None
    finally:
        _CONFIG_FILE.reset(token)
