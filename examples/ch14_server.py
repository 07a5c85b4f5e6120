"""Chapter 14: start `python -m minisgl`, talk to it with the official OpenAI client, stop it.

The server runs in a child process exactly as a user would start it; this script is only a
client. It streams a chat answer, asks for a text completion, shows an OpenAI-style error for a
bad request, prints the KV page counts from /health, and stops the server with SIGTERM.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import openai

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                return json.load(resp)
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    sys.exit("the server did not start in time")


def main() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "minisgl", "--model", MODEL, "--port", str(port),
           "--num-pages", "2048"]
    print("$", " ".join(cmd[1:]))
    server = subprocess.Popen(cmd)
    try:
        print("health:", wait_healthy(url, server))
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        print("models:", [m.id for m in client.models.list().data])

        question = "What is the capital of France?"
        print(f"chat (streamed): {question}\n  ", end="")
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": question}], temperature=0,
            max_tokens=32, stream=True, stream_options={"include_usage": True})
        for chunk in stream:
            for choice in chunk.choices:
                print(choice.delta.content or "", end="|", flush=True)
            if chunk.usage:
                print(f"\n  usage: {chunk.usage.prompt_tokens} prompt + "
                      f"{chunk.usage.completion_tokens} completion tokens")

        done = client.completions.create(model=MODEL, prompt="The three primary colors are",
                                         temperature=0, max_tokens=16, stop=["."])
        print("completion:", repr(done.choices[0].text), done.choices[0].finish_reason)

        try:
            client.chat.completions.create(model=MODEL, temperature=-1,
                                           messages=[{"role": "user", "content": "Hi"}])
        except openai.BadRequestError as e:
            print("bad request ->", e.status_code, e.body)
        print("health:", wait_healthy(url, server))
    finally:
        server.send_signal(signal.SIGTERM)
        print("server exit code after SIGTERM:", server.wait(60))


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - began:.1f} s")
