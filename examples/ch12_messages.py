"""Chapter 12: typed messages in msgpack frames, and the scheduler behind two ZeroMQ sockets.

The scheduler loop (SchedulerIO) runs right here, one `run_once` at a time; this script plays both
of its neighbours: a tokenizer worker pushing UserMsg in, and the detokenizer pulling
TokenOutput out.
"""

from __future__ import annotations

import pickle
import shutil
import time

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.message import (
    AbortMsg,
    ControlMsg,
    MessageError,
    TokenOutput,
    UserMsg,
    decode,
    encode,
)
from minisgl.message.queues import PullQueue, PushQueue
from minisgl.scheduler.io import SchedulerIO
from minisgl.utils.mp import ipc_addr, private_ipc_dir

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France?"


def show_codec() -> None:
    msgs = [UserMsg(7, [1, 9690, 198, 2683], SamplingParams(max_tokens=32)), AbortMsg(7),
            ControlMsg(8, "stats"), TokenOutput(uid=7, token=504, prompt_tokens=4)]
    frame = encode(msgs)
    print(f"{len(msgs)} messages -> one msgpack frame of {len(frame)} bytes: {frame[:40]!r}...")
    back = decode(frame)
    print("decoded back equal:", back == msgs, "| nested:", back[0].sampling_params)
    try:
        decode(pickle.dumps(msgs))
    except MessageError as e:
        print("a pickle frame is refused:", e)


def pump(io: SchedulerIO, out: PullQueue, uid: int) -> list[TokenOutput]:
    """Run the scheduler loop until request `uid` has finished; every TokenOutput that came out."""
    got: list[TokenOutput] = []
    while not any(m.uid == uid and m.finished for m in got):
        io.run_once(block=False)  # take what has arrived, run one step, send its tokens
        got += out.get_all(block=False) if io.scheduler.has_work else out.get(timeout=0.05)
    return got


def pages(llm: LLM) -> dict[str, int]:
    stats = llm.scheduler.stats()
    return {"free": stats.free_pages, "cached": stats.cached_pages,
            "requests": stats.request_pages}


def main() -> None:
    show_codec()

    llm = LLM(MODEL, device="cpu", num_pages=512)
    prompt = llm.tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}])
    params = SamplingParams(max_tokens=32)
    want = llm.generate([prompt], params, use_tqdm=False)[0]["token_ids"]

    folder = private_ipc_dir()
    try:
        scheduler_addr, detokenizer_addr = ipc_addr(folder, "scheduler"), ipc_addr(folder, "detok")
        out = PullQueue(detokenizer_addr)  # the detokenizer's end: it binds, the scheduler connects
        io = SchedulerIO(llm.scheduler, scheduler_addr, detokenizer_addr)
        to_scheduler = PushQueue(scheduler_addr)  # a tokenizer worker's end
        print(f"\nscheduler listens on {scheduler_addr}")

        to_scheduler.put([UserMsg(1, prompt, params)])
        got = pump(io, out, 1)
        ids = [m.token for m in got if m.token is not None]
        print(f"{len(got)} TokenOutput, one per step; last: finished={got[-1].finished}, "
              f"reason={got[-1].finish_reason}, prompt_tokens={got[-1].prompt_tokens}, "
              f"cached_tokens={got[-1].cached_tokens}")
        print("token ids:", ids)
        print("text:", repr(llm.tokenizer.decode(ids, skip_special_tokens=True)))
        print("equal to LLM.generate's greedy tokens:", ids == want)

        # A long request, aborted while it decodes: its pages come back.
        to_scheduler.put([UserMsg(2, prompt, SamplingParams(max_tokens=400, ignore_eos=True))])
        got = []
        while len(got) < 5:
            io.run_once(block=False)
            got += out.get_all(block=False)
        print("\nwhile request 2 runs:", pages(llm))
        to_scheduler.put([AbortMsg(2)])
        end = pump(io, out, 2)[-1]
        print(f"after AbortMsg(2):    {pages(llm)}")
        print(f"its last message: finished={end.finished}, reason={end.finish_reason!r}")
        for q in (to_scheduler, out, io.recv, io.send):
            q.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        llm.shutdown()
    print("removed", folder)


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - began:.1f} s")
