"""llama-cpp-python's OpenAI server with all of llama.cpp's work on one thread.

Its app hands every request, and every token of a streamed answer, to Starlette's thread
pool, so consecutive tokens ran on whichever pooled thread was free. llama.cpp's OpenMP
keeps a team of worker threads per calling thread, and with more than one team alive each
token took about 40 % longer on 2 cores (the in-process engine had the same fault: see
``InProcessLlama``). The server answers one request at a time anyway, so one thread loses
nothing. Run as ``python -m agent.llm.servers.llama_cpp_python`` with llama_cpp.server's
arguments.
"""

from __future__ import annotations

import asyncio
import functools
import runpy
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import llama_cpp.server.app as app

_LLAMA_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
_DONE = object()


async def run_on_llama_thread(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``starlette.concurrency.run_in_threadpool``, on the one llama thread."""
    call = functools.partial(func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_LLAMA_THREAD, call)


async def iterate_on_llama_thread(iterator: Iterator[Any]) -> AsyncIterator[Any]:
    """``starlette.concurrency.iterate_in_threadpool``, on the one llama thread."""
    while (item := await run_on_llama_thread(next, iterator, _DONE)) is not _DONE:
        yield item


def main() -> None:
    app.run_in_threadpool = run_on_llama_thread
    app.iterate_in_threadpool = iterate_on_llama_thread
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
