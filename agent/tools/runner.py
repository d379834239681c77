"""Running the tools a model called: in parallel, bounded in time, each side effect once.

A call's result is what the model reads next, so every outcome is text it can say: a
tool's return value as JSON, or, when it failed or took longer than its timeout, the
tool's ``error_message`` ("The booking system could not be reached ..."); nothing raises.

A tool with a side effect (a booking) runs once per call for the same arguments, whichever
turn asks: a turn heard again (a speculative answer and the confirmed one, an answer asked
again, the same request after a barge-in) gets the first run's result. Other tools run once
per turn for the same arguments. A run is never cut off half-way by a barge-in (its result
is kept for the next ask): a request stopped mid-flight would leave a booking unknown.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agent.errors import UserError
from agent.settings import ToolSpec

Arguments = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: the tool's name and its (parsed) arguments."""

    name: str
    arguments: Arguments = field(default_factory=dict)
    id: str = ""

    def key(self) -> str:
        """The call's identity: its name and arguments, whatever order they came in."""
        return f"{self.name}:{json.dumps(self.arguments, sort_keys=True)}"


@dataclass(frozen=True)
class ToolResult:
    call: ToolCall
    content: str  # what the model reads
    ok: bool = True


class ToolRunner:
    """The declared tools of one call, and the results of what already ran in it."""

    def __init__(self, functions: Iterable[ToolSpec]) -> None:
        self._specs = {f.name: f for f in functions}
        self._runs: dict[tuple[int | None, str], asyncio.Task[ToolResult]] = {}
        self.executions = 0  # how many times an implementation actually ran
        self.results: list[ToolResult] = []  # every call answered in this call, in order

    def __bool__(self) -> bool:
        return bool(self._specs)

    def side_effect(self, call: ToolCall) -> bool:
        spec = self._specs.get(call.name)
        return spec is not None and spec.side_effect

    async def run(self, calls: list[ToolCall], turn: int) -> list[ToolResult]:
        """The results of ``calls`` (in their order), run at once; ``turn``: the caller's
        turn they answer (a non side-effect call runs again in a later turn)."""
        return list(await asyncio.gather(*(self._result(call, turn) for call in calls)))

    async def _result(self, call: ToolCall, turn: int) -> ToolResult:
        key = (None if self.side_effect(call) else turn, call.key())
        task = self._runs.get(key)
        if task is None or (task.done() and task.cancelled()):
            task = asyncio.ensure_future(self._execute(call))
            self._runs[key] = task
        result = await asyncio.shield(task)  # a barge-in stops the wait, not the run
        result = ToolResult(call, result.content, result.ok)
        self.results.append(result)
        return result

    async def _execute(self, call: ToolCall) -> ToolResult:
        spec = self._specs.get(call.name)
        if spec is None:
            known = ", ".join(self._specs) or "none"
            return ToolResult(call, f"There is no tool {call.name}; the tools are: {known}.", False)
        self.executions += 1
        try:
            async with asyncio.timeout(spec.timeout_secs):
                value = await (self._post(spec, call) if spec.url else self._python(spec, call))
        except Exception:  # noqa: BLE001 - any failure of the tool is told to the model
            return ToolResult(call, spec.error_message.replace("{name}", spec.name), False)
        return ToolResult(call, value if isinstance(value, str) else json.dumps(value))

    @staticmethod
    async def _python(spec: ToolSpec, call: ToolCall) -> Any:
        function = implementation(str(spec.python))
        if inspect.iscoroutinefunction(function):
            return await function(**call.arguments)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: function(**call.arguments))

    @staticmethod
    async def _post(spec: ToolSpec, call: ToolCall) -> Any:
        digest = hashlib.sha256(call.key().encode()).hexdigest()[:32]
        headers = {"Idempotency-Key": digest}  # a server that sees a retry books once too
        if spec.auth_env:
            headers[spec.auth_header] = os.environ[spec.auth_env]
        async with httpx.AsyncClient(timeout=spec.timeout_secs) as client:
            response = await client.post(str(spec.url), json=call.arguments, headers=headers)
            response.raise_for_status()
            try:
                return response.json()
            except ValueError:
                return response.text


@functools.cache
def implementation(path: str) -> Callable[..., Any]:
    """The function ``module:function`` (or ``file.py:function``, from the current
    directory: an agent's own tools beside its YAML) names."""
    where, _, name = path.rpartition(":")
    try:
        if where.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(where).stem, where)
            if spec is None or spec.loader is None:
                raise ImportError(where)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except (ImportError, OSError) as exc:
        raise UserError(f"tool implementation {path}: cannot load {where} ({exc})") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise UserError(f"tool implementation {path}: no function {name!r} in {where}")
    return function


def check_implementations(functions: Iterable[ToolSpec]) -> None:
    """Load every Python tool once at start: a wrong path is one line then, not a failing
    tool in the middle of a call."""
    for spec in functions:
        if spec.python:
            implementation(spec.python)
