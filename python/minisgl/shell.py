"""`python -m minisgl --shell`: chat with the model in the terminal.

The shell is a frontend like the API server, without HTTP: it sends the whole conversation to
the tokenizer workers as a chat and prints the answer's pieces as they arrive. Commands:
/help lists them, /reset forgets the conversation, /exit (or Ctrl-D) leaves. Ctrl-C while an
answer streams stops it (the engine aborts the request) and keeps what was said so far; Ctrl-C at
the prompt asks for a second one, which leaves.
"""

from __future__ import annotations

import asyncio
import signal
import threading

from minisgl.core import SamplingParams
from minisgl.env import load_env
from minisgl.message.client import FrontendClient

PROMPT = ">>> "
COMMANDS = {
    "/help": "list these commands",
    "/reset": "forget the conversation",
    "/exit": "leave (or Ctrl-D, or Ctrl-C twice at the prompt)",
}
HELP = "Type a message and press Enter; Ctrl-C stops an answer. /help lists the commands."
STOPPED = "(stopped)"
PRESS_AGAIN = "(press Ctrl-C again to leave, or type /exit)"


def help_text() -> str:
    return "\n".join(f"{name:<8} {what}" for name, what in COMMANDS.items())


class LineReader:
    """input() in a daemon thread (it cannot be cancelled, and must not keep the process alive
    at exit). A line asked for and not typed yet stays pending across Ctrl-C: the next `read`
    waits for the same line rather than start a second reader on the terminal."""

    def __init__(self) -> None:
        self._pending: asyncio.Future[str | None] | None = None

    async def read(self, prompt: str) -> str | None:
        """The next line, None at end of input."""
        if self._pending is None:
            loop = asyncio.get_running_loop()
            self._pending = done = loop.create_future()

            def work() -> None:
                try:
                    line: str | None = input(prompt)
                except EOFError:
                    line = None
                loop.call_soon_threadsafe(lambda: done.done() or done.set_result(line))

            threading.Thread(target=work, daemon=True).start()
        else:
            print(prompt, end="", flush=True)  # input() printed it once already
        try:
            return await asyncio.shield(self._pending)
        finally:
            if self._pending.done():
                self._pending = None


class Interrupts:
    """Ctrl-C, as the shell means it: cancel the task that is streaming an answer; at the
    prompt, the first one warns and a second one in a row leaves."""

    def __init__(self) -> None:
        self.current: asyncio.Task | None = None  # the answer being streamed, or the prompt
        self.at_prompt = False
        self.armed = False  # a Ctrl-C at the prompt has warned already
        self.leave = False

    def on_sigint(self) -> None:
        if self.at_prompt and self.armed:
            self.leave = True
        elif self.at_prompt:
            self.armed = True
            print(f"\n{PRESS_AGAIN}", flush=True)
        if self.current is not None:  # at the prompt, the line being read stays pending
            self.current.cancel()


async def chat_loop(client: FrontendClient) -> None:
    env = load_env()
    params = SamplingParams(temperature=env.shell_temperature, max_tokens=env.shell_max_tokens)
    history: list[dict[str, str]] = []
    reader, ctrl_c = LineReader(), Interrupts()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, ctrl_c.on_sigint)
    print(HELP, flush=True)
    try:
        while True:
            line = await _prompt(reader, ctrl_c)
            if line is None or line.strip() == "/exit":
                print(flush=True)
                return
            line = line.strip()
            if not line:
                continue
            if line == "/help":
                print(help_text(), flush=True)
                continue
            if line == "/reset":
                history.clear()
                print("(the conversation is cleared)", flush=True)
                continue
            if line.startswith("/"):
                print(f"unknown command {line}. {HELP}", flush=True)
                continue
            history.append({"role": "user", "content": line})
            answer = await _interruptible(answer_one(client, history, params), ctrl_c)
            if answer is None:
                history.pop()  # the request failed; it is not part of the conversation
            else:
                history.append({"role": "assistant", "content": answer})
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def _prompt(reader: LineReader, ctrl_c: Interrupts) -> str | None:
    """The next line typed; None to leave (end of input, or Ctrl-C twice)."""
    ctrl_c.at_prompt, ctrl_c.armed = True, False
    try:
        while True:
            ctrl_c.current = asyncio.ensure_future(reader.read(PROMPT))
            try:
                return await ctrl_c.current
            except asyncio.CancelledError:
                if ctrl_c.leave:
                    return None
    finally:
        ctrl_c.at_prompt, ctrl_c.current = False, None


async def _interruptible(answer, ctrl_c: Interrupts) -> str | None:
    ctrl_c.current = task = asyncio.ensure_future(answer)
    try:
        return await task
    finally:
        ctrl_c.current = None


async def answer_one(client: FrontendClient, history: list[dict[str, str]],
                     params: SamplingParams) -> str | None:
    """Stream one answer to the terminal; its text (as far as it got, if Ctrl-C stopped it),
    or None if the engine refused the chat."""
    stream = client.submit(params, messages=list(history))
    answer = ""
    try:
        async for reply in stream:
            if reply.error is not None:
                print(f"error: {reply.error}", flush=True)
                return None
            answer += reply.text
            print(reply.text, end="", flush=True)
    except asyncio.CancelledError:  # Ctrl-C: closing the stream below aborts the request
        print(f" {STOPPED}", end="", flush=True)
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
