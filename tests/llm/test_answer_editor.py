"""What the LLM stage lets through: the sentence stop, no sentence said twice, no echo, no loop,
a history without degenerate answers, the same decoding options on every request, the persona
and the greeting. A scripted engine stands in for the model, so each rule is seen alone; the
real models go through the conversation set in benchmarks/tests/test_conversation.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pipecat.frames.frames import (
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame

from agent.clock import ComputeClock
from agent.llm.answer import AnswerEditor, Verdict, has_loop, is_echo, repeats
from agent.llm.engines.chat import OpenAIChatEngine, Sampling
from agent.llm.prompt import prompt_messages
from agent.llm.service import StreamingLLM
from agent.pipeline import llm_engine
from agent.settings import Settings, load_settings
from tests.support.compute_pace import run_paced
from tests.support.fakes import ScriptedAnswers
from tests.support.llm_stage import SETTINGS, history, spoken


async def test_the_answer_ends_with_its_second_sentence_and_decoding_stops_there():
    engine = ScriptedAnswers(
        "Paris is the capital of France. It lies on the Seine. It has the Eiffel Tower. "
        "Many people visit it every year and walk along the river for hours."
    )
    said = await spoken(engine, history("Tell me about Paris."))
    assert said == "Paris is the capital of France. It lies on the Seine."
    # The stream was closed one token into the third sentence, not read to its end.
    assert engine.taken == [12]


async def test_max_sentences_is_a_setting():
    engine = ScriptedAnswers("One. Two. Three.")
    assert await spoken(engine, history("Count."), max_sentences=1) == "One."


async def test_a_sentence_said_before_is_left_out_and_the_answer_goes_on():
    engine = ScriptedAnswers("I'm glad to see you again. How can I help? Just ask.")
    messages = history("Hello.", "I'm glad to see you again.", "Hi again.")
    assert await spoken(engine, messages) == " How can I help? Just ask."
    assert len(engine.requests) == 1


async def test_an_answer_with_nothing_new_is_asked_again_and_never_spoken():
    engine = ScriptedAnswers("I'm glad to see you again.", "The weather is fine today.")
    messages = history("Hello.", "I'm glad to see you again.", "What's the weather like?")
    said = await spoken(engine, messages)
    assert said == "The weather is fine today."
    first, second = (r["messages"] for r in engine.requests)
    assert second[:-1] == first  # the cached prefix holds: the note comes after it
    assert second[-1] == {"role": "system", "content": SETTINGS.retry_note}


async def test_a_later_sentence_said_before_is_left_out():
    engine = ScriptedAnswers("Sure thing. The capital of France is Paris. Anything else?")
    messages = history("Capital of France?", "The capital of France is Paris.", "Tell me more.")
    assert await spoken(engine, messages) == "Sure thing. Anything else?"


async def test_an_echo_of_the_caller_is_not_spoken():
    engine = ScriptedAnswers(
        "We must find a new home in the stars.", "That sounds like a big adventure."
    )
    said = await spoken(engine, history("We must find a new home in the stars."))
    assert said == "That sounds like a big adventure."
    engine = ScriptedAnswers("My fellow Americans, we must go. Good luck to you.")
    heard = "My fellow Americans, what can we do?"
    assert await spoken(engine, history(heard)) == " Good luck to you."
    engine = ScriptedAnswers("Hi there! How are you today? I'm fine.")
    assert await spoken(engine, history("Hi there, how are you today?")) == "Hi there! I'm fine."


async def test_a_repeat_on_both_tries_speaks_a_set_line():
    """Nothing new to a question: the fallback line asks again; nothing new to a statement,
    which the bot did hear: it acknowledges instead of asking the caller to repeat it."""
    engine = ScriptedAnswers("Hello there.", "Hello there.")
    said = await spoken(engine, history("Hi.", "Hello there.", "Are you still there?"))
    assert said == SETTINGS.fallback_lines[0]
    engine = ScriptedAnswers("Hello there.", "Hello there.")
    said = await spoken(engine, history("Hi.", "Hello there.", "I am still here."))
    assert said == SETTINGS.acknowledgement_lines[0]


async def test_the_example_exchanges_lines_are_never_said():
    # Copied to a caller they were not written for, either side fits nothing: asked again.
    example = SETTINGS.examples[0]
    for line in (example.answer, example.caller):
        engine = ScriptedAnswers(line, "Oh, tell me more.")
        assert await spoken(engine, history("My cat is asleep.")) == "Oh, tell me more.", line
        assert len(engine.requests) == 2


async def test_a_call_that_needs_the_fallback_again_hears_other_words():
    first, second, third = SETTINGS.fallback_lines
    engine = ScriptedAnswers("Hello there.", "Hello there.")
    said = await spoken(engine, history("Hi.", "Hello there.", "Hi?", first, "Hi again?"))
    assert said == second and not repeats(second, [first])
    # Once it heard them all, the one heard longest ago (not the first again and again).
    calls = ("Hi.", "Hello there.", "A?", second, "B?", first, "C?", third, "D?")
    engine = ScriptedAnswers("Hello there.", "Hello there.")
    assert await spoken(engine, history(*calls)) == second


async def test_a_first_sentence_opening_as_a_recent_answer_did_is_left_out():
    """A small model falls into a template ("What kind of toys do you have?", "What kind of
    gold do you have?", ...) that no single sentence repeats: a first sentence that opens
    with the words one of the last two answers opened with is left unsaid, as a repeat is."""
    calls = ("Hi.", "What kind of toys do you have?", "I have a toy frog.")
    engine = ScriptedAnswers("What kind of frog is it? Frogs are fun.")
    assert await spoken(engine, history(*calls)) == " Frogs are fun."
    # Alone, it is asked again; the second try samples, and its opening is its own.
    engine = ScriptedAnswers("What kind of frog is it?", "What kind of frog? A green one!")
    assert await spoken(engine, history(*calls)) == "What kind of frog? A green one!"
    assert len(engine.requests) == 2
    # Later in the answer the words are free, and so is an opening three answers back.
    engine = ScriptedAnswers("Nice. What kind of frog is it?")
    assert await spoken(engine, history(*calls)) == "Nice. What kind of frog is it?"
    older = (*calls, "A frog!", "It sings.", "Lovely.", "It is green.")
    engine = ScriptedAnswers("What kind of frog is it?")
    assert await spoken(engine, history(*older)) == "What kind of frog is it?"


async def test_a_phrase_looping_inside_the_answer_is_cut():
    engine = ScriptedAnswers("L'Alma, la France, la France, la France, la France, la France.")
    said = await spoken(engine, history("What is the capital of France?"))
    assert said and not has_loop(said)
    assert engine.taken[0] < 8


async def test_an_echo_stops_decoding_as_soon_as_it_reads_the_caller_back():
    """An answer to a statement held from its start that opens with four of the caller's
    words in a row is an echo (as the eval counts it); any held sentence that says eight in
    a row can only be dropped. Either way the model is not left to read out the rest of the
    caller's sentence first."""
    heard = "The Norsemen considered the rainbow as a bridge over which the gods passed."
    engine = ScriptedAnswers(heard, "What a lovely old story.")
    assert await spoken(engine, history(heard)) == "What a lovely old story."
    assert engine.taken[0] == 5  # the fourth word is whole once the fifth begins
    asked = "Did the Norsemen consider the rainbow as a bridge over which the gods passed?"
    engine = ScriptedAnswers(asked, "They did, in their old stories.")
    assert await spoken(engine, history(asked)) == "They did, in their old stories."
    assert engine.taken[0] == 9  # a question's own words may open its answer: eight in a row
    question = "Is the capital of France Paris or Lyon?"
    engine = ScriptedAnswers("The capital of France is Paris.")
    assert await spoken(engine, history(question)) == "The capital of France is Paris."
    # The same words not read in a row ("Norsemen" is a name the model may well say) stream.
    engine = ScriptedAnswers("The Norsemen were sailors who crossed the sea in open boats.")
    said = await spoken(engine, history(heard))
    assert said == "The Norsemen were sailors who crossed the sea in open boats."
    # Nothing else held it (it begins no sentence said before): the caller's words from the
    # middle of their sentence, behind a quote mark, are held as the run goes on, then ended.
    engine = ScriptedAnswers('"Rainbow as a bridge over which the gods passed."', "How lovely.")
    assert await spoken(engine, history(heard)) == "How lovely."
    assert engine.taken[0] == 5


async def test_answers_that_diverge_at_once_are_not_held_back():
    """Only a sentence that could still become one said before is held: others stream."""
    editor = AnswerEditor(["I'm glad to see you again."], "How are you?", 2)
    assert editor.feed("I").text == ""  # could become the earlier sentence
    assert editor.feed("'m").text == ""
    assert editor.feed(" fine").text == "I'm fine"  # it diverged: out at once
    assert editor.feed(",").text == ","
    editor = AnswerEditor(["I'm glad to see you again."], "How are you?", 2)
    for token in ["I", "'m", " glad", " to", " see", " you", " again", "."]:
        assert editor.feed(token).text == ""
    assert editor.finish().verdict is Verdict.REGENERATE  # dropped, and nothing else came
    editor.restart()
    assert editor.feed("Hello").text == "Hello"  # a new stream: diverges at once


def test_a_later_sentence_is_judged_whole_so_a_read_back_after_own_words_is_unsaid():
    """The second sentence opens with the model's own words, then reads the caller back: held
    to its end (the first sentence is playing meanwhile), it is left out, not said."""
    heard = "She had your dark suit in greasy wash water all year."
    editor = AnswerEditor([], heard, 2)
    first = ["That", " sounds", " like", " a", " mix", "-up", "."]
    second = [" Did", " she", " have", " her", " dark", " suit", " in", " greasy", " wash",
              " water", " all", " year", "?"]  # fmt: skip
    said = "".join(editor.feed(t).text for t in first)
    during = [editor.feed(t).text for t in second]
    assert during[0] == " " and not "".join(during[1:])  # only the space before it went out
    end = editor.finish()
    assert (said + "".join(during) + end.text).rstrip() == "That sounds like a mix-up."
    assert editor.cut == "repeat" and editor.text == "That sounds like a mix-up."


S = [{"role": "system", "content": "S"}]


def test_the_history_drops_degenerate_answers_and_keeps_what_the_caller_said():
    fallback = SETTINGS.fallback_lines[0]
    full = history(
        "Hi, I'm Maria.", "I'm glad to see you again.",
        "What part of the United States is your home?", "I'm glad to see you again.",
        "Tell me a joke.", "la France, la France, la France.",
        "Hello?", fallback,
        "What's my name?",
    )  # fmt: skip
    messages = prompt_messages(S, full, 10, [fallback])
    assert [m["content"] for m in messages] == [
        "S", "Hi, I'm Maria.", "I'm glad to see you again.",
        "What part of the United States is your home?", "Tell me a joke.", "Hello?",
        "What's my name?",
    ]  # fmt: skip
    # Dropping depends only on what came before: the next turn's prompt extends this one.
    more = [{"role": "assistant", "content": "Your name is Maria."},
            {"role": "user", "content": "Thanks."}]  # fmt: skip
    later = prompt_messages(S, [*full, *more], 10, [fallback])
    assert later[: len(messages)] == messages


def test_history_trimming_counts_exchanges_when_answers_were_dropped():
    full = history("u0", "same answer.", "u1", "same answer.", "u2", "a2.", "u3", "a3.", "u4")
    messages = prompt_messages(S, full, 2)
    assert [m["content"] for m in messages] == ["S", "u2", "a2.", "u3", "a3.", "u4"]


def test_what_counts_as_a_repeat_a_loop_and_an_echo():
    assert repeats("I'm glad to see you again!", ["Hi. I'm glad to see you again."])
    assert repeats("Well, I am so glad to see you again today.",
                   ["I am so glad to see you again today."])  # fmt: skip
    assert not repeats("The capital of France is Paris.", ["Paris is lovely in spring."])
    assert has_loop("L'Alma, la France, la France.")
    assert has_loop("I can help you with that and I can help you with that too")
    assert not has_loop("The capital of France is Paris. It is a big city.")
    assert is_echo("We must find a new home in the stars.", "We must find a new home in the stars.")
    jfk = "ask not what your country can do for you, ask what you can do for your country."
    assert is_echo("You said: ask not what your country can do for you.", jfk)
    assert not is_echo("Paris is the capital.", "What is the capital of France?")
    assert not is_echo("Got it, your booking number is 3 5 8.", "My booking number is 3 5 8.")
    assert not is_echo("You're welcome! Goodbye.", "Okay, thanks. Goodbye.")  # a farewell


async def test_every_request_sends_the_configured_decoding_options():
    engine = ScriptedAnswers("Fine.")
    s = dict(temperature=0.3, seed=7, repeat_penalty=1.15, presence_penalty=0.2)
    await spoken(engine, history("How are you?"), **s)
    assert engine.requests[0]["sampling"] == Sampling(
        temperature=0.3, seed=7, repeat_penalty=1.15, presence_penalty=0.2, frequency_penalty=0
    )


def test_the_persona_comes_from_the_config_file(tmp_path):
    config = tmp_path / "persona.yaml"
    config.write_text(
        "llm:\n"
        "  bot_name: Juno\n"
        "  system_prompt: You are {bot_name}, the front desk of a small hotel.\n"
        "  greeting: Hotel Aurora, {bot_name} speaking.\n"
        "  fallback_line: Sorry, could you repeat that?\n"
        "  examples:\n"
        "    - caller: Hi {bot_name}, I'd like a room for Friday.\n"
        "      answer: Please call {bot_name} at the desk on 555 0100.\n"
    )
    s = load_settings(config).llm
    assert s.system_prompt == "You are Juno, the front desk of a small hotel."
    assert s.greeting == "Hotel Aurora, Juno speaking."
    assert s.fallback_lines == ["Sorry, could you repeat that?"]  # one line is a list of one
    assert s.opening[1:] == [
        {"role": "user", "content": "Hi Juno, I'd like a room for Friday."},
        {"role": "assistant", "content": "Please call Juno at the desk on 555 0100."},
    ]
    config.write_text('llm:\n  fallback_lines: ["Say again, {bot_name}?", "Pardon?"]\n')
    assert load_settings(config).llm.fallback_lines == ["Say again, Ava?", "Pardon?"]


async def test_the_opening_is_the_same_bytes_first_in_every_request():
    engine = ScriptedAnswers("One thing.", "Another thing.", "A third thing.")
    clock = ComputeClock()
    llm = StreamingLLM(engine, SETTINGS, clock)
    context = LLMContext(messages=history("Hi."))
    frames = [LLMContextFrame(context=context), SleepFrame(0.2)]
    for text in ("And?", "Then?"):
        frames += [LLMContextFrame(context=LLMContext(messages=[
            *context.messages, {"role": "assistant", "content": "ok."},
            {"role": "user", "content": text}])), SleepFrame(0.2)]  # fmt: skip
    await run_paced(llm, frames_to_send=frames, clock=clock)
    opening = SETTINGS.opening  # the system prompt, then the example exchanges
    assert opening[0] == {"role": "system", "content": SETTINGS.system_prompt}
    assert len(opening) == 1 + 2 * len(SETTINGS.examples) > 1
    firsts = [r["messages"][: len(opening)] for r in engine.requests]
    assert firsts == [opening] * 3


async def test_the_greeting_is_spoken_first_when_asked_for():
    engine = ScriptedAnswers()
    clock = ComputeClock()
    llm = StreamingLLM(engine, SETTINGS, clock, greet=True)
    down, _ = await run_paced(llm, frames_to_send=[SleepFrame(0.1)], clock=clock)
    assert [type(f) for f in down[:3]] == [
        LLMFullResponseStartFrame, LLMTextFrame, LLMFullResponseEndFrame,
    ]  # fmt: skip
    assert down[1].text == SETTINGS.greeting and "Ava" in SETTINGS.greeting
    clock = ComputeClock()
    quiet, _ = await run_paced(StreamingLLM(engine, SETTINGS, clock),
                               frames_to_send=[SleepFrame(0.1)], clock=clock)  # fmt: skip
    assert not [f for f in quiet if isinstance(f, LLMTextFrame)]
    assert not engine.requests  # a greeting costs no model request


def test_a_sentence_nearly_said_before_is_held_to_its_end():
    editor = AnswerEditor(["I've been working on a new app, and it's called Echo."], "Hi.", 2)
    first, *rest = "I've been working on a new app called Echo.".split(" ")
    out = "".join(editor.feed(token).text for token in [first, *(" " + w for w in rest)])
    assert out == "" and editor.finish().verdict is Verdict.REGENERATE


class _Recorder(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that records each request body and streams "Hi."."""

    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook
        length = int(self.headers["Content-Length"])
        _Recorder.bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        delta = {"index": 0, "delta": {"content": "Hi."}, "finish_reason": None}
        chunk = {"id": "1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                 "choices": [delta]}  # fmt: skip
        self.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("server", "field"),
    [("llama-server", "repeat_penalty"), ("vllm", "repetition_penalty"), (None, None)],
)
async def test_servers_get_the_same_options_under_their_own_names(server, field):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _Recorder.bodies.clear()
    try:
        url = f"http://127.0.0.1:{httpd.server_port}/v1"
        engine = OpenAIChatEngine(url, "m", SETTINGS, server=server)
        sampling = Sampling(temperature=0.0, seed=3, repeat_penalty=1.15, presence_penalty=0.1)
        said = [x async for x in engine.stream(history("Hi?"), max_tokens=9, sampling=sampling)]
    finally:
        httpd.shutdown()
    assert said[0] == "Hi."
    (body,) = _Recorder.bodies
    assert body["temperature"] == 0.0 and body["seed"] == 3 and body["max_tokens"] == 9
    assert body["presence_penalty"] == 0.1 and body["frequency_penalty"] == 0.0
    names = {"repeat_penalty", "repetition_penalty"}
    assert {k for k in body if k in names} == ({field} if field else set())
    if field:
        assert body[field] == 1.15


async def test_a_url_said_to_be_llama_server_gets_its_repeat_penalty():
    """engine=openai with ``base_url_server`` (what a pool's workers are given) sends the
    option only that server takes, so a pool decodes as one agent does."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _Recorder.bodies.clear()
    try:
        url = f"http://127.0.0.1:{httpd.server_port}/v1"
        llm = {"engine": "openai", "base_url": url, "base_url_server": "llama-server"}
        with llm_engine(Settings(llm=llm)) as engine:
            said = [
                x
                async for x in engine.stream(
                    history("Hi?"), max_tokens=9, sampling=Sampling(repeat_penalty=1.1)
                )
            ]
    finally:
        httpd.shutdown()
    assert said[0] == "Hi."
    (body,) = _Recorder.bodies
    assert body["repeat_penalty"] == 1.1


def test_an_opening_bracket_does_not_let_a_repeat_through():
    editor = AnswerEditor(["(I'll leave it to you, I'm sure. Bye.)"], "Hello.", 2)
    out = "".join(editor.feed(t).text for t in ["(", "I", "'ll", " leave", " it", " to", " you",
                                                ",", " I", "'m", " sure", ".)"])  # fmt: skip
    assert out == "" and editor.finish().verdict is Verdict.REGENERATE


async def test_a_farewell_may_say_goodbye_back():
    engine = ScriptedAnswers("You're welcome! Goodbye.")
    assert await spoken(engine, history("Okay, thanks. Goodbye.")) == "You're welcome! Goodbye."


async def test_the_second_try_does_not_read_the_note_back():
    note = SETTINGS.retry_note
    engine = ScriptedAnswers("I'm glad to see you again.", f"Sure. {note}", "Fine, thanks.")
    messages = history("Hello.", "I'm glad to see you again.", "How are you?")
    said = await spoken(engine, messages)
    assert note.lower() not in said.lower() and "own words" not in said, said
