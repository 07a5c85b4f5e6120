"""How many streamed chunks per second can the online benchmark's client take?

    python benchmarks/serving_client_ceiling.py [--requests 160] [--tokens 320]

A stand-in server streams one-token chat chunks as fast as it can (no model), and one client
process reads --requests streams at once, first with the official openai client (typed chunk
objects), then with `minisgl.benchmark.serving`'s own reader (SSE lines parsed with json). If
the client's ceiling is near what a server delivers, a benchmark measures the client: on the
H200 the server's output at unlimited rate (~5,600 tok/s, h200_online_serving.txt) sat at the
openai client's ceiling, which is why the benchmark no longer uses it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import socket
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from minisgl.benchmark.serving import http_client, stream_chunks


def fake_server(port: int) -> None:
    """Runs in its own process, so that it does not share the client's interpreter."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> StreamingResponse:
        n = (await request.json())["max_tokens"]

        async def events():
            for _ in range(n):
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                         "model": "fake", "choices": [{"index": 0, "delta": {"content": " x"},
                                                       "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def wait_for_port(port: int) -> None:
    for _ in range(200):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit("the stand-in server did not start")


async def with_openai(url: str, requests: int, tokens: int) -> int:
    import openai

    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as client:
        async def one() -> int:
            stream = await client.chat.completions.create(
                model="fake", messages=[{"role": "user", "content": "hi"}], max_tokens=tokens,
                stream=True)
            return sum([1 async for chunk in stream
                        if chunk.choices and chunk.choices[0].delta.content])

        return sum(await asyncio.gather(*[one() for _ in range(requests)]))


async def with_own_reader(url: str, requests: int, tokens: int) -> int:
    async with http_client(url) as http:
        async def one() -> int:
            body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": tokens, "stream": True}
            return sum([1 async for chunk in stream_chunks(http, "/v1/chat/completions", body)
                        if chunk["choices"][0]["delta"].get("content")])

        return sum(await asyncio.gather(*[one() for _ in range(requests)]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--requests", type=int, default=160, help="streams read at once")
    parser.add_argument("--tokens", type=int, default=320, help="chunks per stream")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = mp.get_context("spawn").Process(target=fake_server, args=(port,), daemon=True)
    server.start()
    wait_for_port(port)
    url = f"http://127.0.0.1:{port}"
    for name, reader in (("openai client", with_openai), ("own SSE reader", with_own_reader)):
        start = time.perf_counter()
        chunks = asyncio.run(reader(url, args.requests, args.tokens))
        seconds = time.perf_counter() - start
        assert chunks == args.requests * args.tokens, chunks
        print(f"{name:15s}: {chunks} chunks of {args.requests} streams in {seconds:.2f} s = "
              f"{chunks / seconds:.0f} chunks/s", flush=True)
    server.terminate()
    server.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
