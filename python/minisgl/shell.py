"""`python -m minisgl --shell`: chat with the model in the terminal.

The shell is a frontend like the API server, without HTTP: it sends the whole conversation to
the tokenizer workers as a chat and prints the answer's pieces as they arrive. Commands:
/reset forgets the conversation, /exit (or Ctrl-D) leaves.
"""

from __future__ import annotations

import asyncio
import threading

from minisgl.core import SamplingParams
from minisgl.env import load_env
from minisgl.message.client import FrontendClient

PROMPT = ">>> "
HELP = "Type a message and press Enter. /reset forgets the conversation, /exit leaves."


async def read_line(prompt: str) -> str | None:
    """input() in a daemon thread (it cannot be cancelled, and must not keep the process
    alive at exit); None at end of input."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str | None] = loop.create_future()

    def work() -> None:
        try:
            line: str | None = input(prompt)
        except EOFError:
            line = None
        loop.call_soon_threadsafe(lambda: done.done() or done.set_result(line))

    threading.Thread(target=work, daemon=True).start()
    return await done


async def chat_loop(client: FrontendClient) -> None:
    env = load_env()
    params = SamplingParams(temperature=env.shell_temperature, max_tokens=env.shell_max_tokens)
    history: list[dict[str, str]] = []
    print(HELP, flush=True)
    while True:
        line = await read_line(PROMPT)
        if line is None or line.strip() == "/exit":
            print(flush=True)
            return
        line = line.strip()
        if not line:
            continue
        if line == "/reset":
            history.clear()
            print("(the conversation is cleared)", flush=True)
            continue
        if line.startswith("/"):
            print(f"unknown command {line}. {HELP}", flush=True)
            continue
        history.append({"role": "user", "content": line})
        answer = await answer_one(client, history, params)
        if answer is None:
            history.pop()  # the request failed; it is not part of the conversation
        else:
            history.append({"role": "assistant", "content": answer})


async def answer_one(client: FrontendClient, history: list[dict[str, str]],
                     params: SamplingParams) -> str | None:
    """Stream one answer to the terminal; its text, or None if the engine refused the chat."""
    stream = client.submit(params, messages=list(history))
    answer = ""
    try:
        async for reply in stream:
            if reply.error is not None:
                print(f"error: {reply.error}", flush=True)
                return None
            answer += reply.text
            print(reply.text, end="", flush=True)
    finally:
        stream.close()
    print(flush=True)
    return answer


def run_shell(tokenizer_addrs: list[str], frontend_addr: str) -> None:
    async def main() -> None:
        client = FrontendClient(tokenizer_addrs, frontend_addr)
        client.start()
        try:
            await chat_loop(client)
        finally:
            client.close()

    try:
        import readline  # noqa: F401  (line editing and history for input(), where available)
    except ImportError:
        pass
    asyncio.run(main())
