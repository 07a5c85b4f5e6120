"""Chapter 13: the tokenizer, scheduler and detokenizer as three processes.

    this script --TokenizeMsg--> tokenizer-0 --UserMsg--> scheduler --TokenOutput--> detokenizer
         ^                                                                              |
         '------------------------------- UserReply (text pieces) -----------------------'

The launcher of chapter 14 does the same with more care (a watchdog, signals); here it is plain.
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import time

from minisgl.core import SamplingParams
from minisgl.message import ReadyMsg, TokenizeMsg, UserReply
from minisgl.message.queues import PullQueue, PushQueue
from minisgl.scheduler import SchedulerConfig
from minisgl.scheduler.io import run_scheduler_process
from minisgl.tokenizer.server import detokenize_worker, tokenize_worker
from minisgl.utils.hf import resolve_model
from minisgl.utils.mp import ipc_addr, private_ipc_dir

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France?"


def main() -> None:
    path = str(resolve_model(MODEL))
    folder = private_ipc_dir()
    addr = {name: ipc_addr(folder, name)
            for name in ("tokenizer-0", "scheduler", "detokenizer", "frontend", "ready")}
    ready = PullQueue(addr["ready"])  # bound before any worker starts, so no report is lost
    frontend = PullQueue(addr["frontend"])
    ctx = mp.get_context("spawn")  # fresh interpreters: nothing of this process is copied
    procs = [
        ctx.Process(target=run_scheduler_process, name="scheduler",
                    args=(SchedulerConfig(model_path=path, num_pages=512),
                          addr["scheduler"], addr["detokenizer"], addr["ready"])),
        ctx.Process(target=tokenize_worker, name="tokenizer-0",
                    args=(path, addr["tokenizer-0"], addr["scheduler"], addr["frontend"],
                          addr["ready"], "tokenizer-0")),
        ctx.Process(target=detokenize_worker, name="detokenizer",
                    args=(path, addr["detokenizer"], addr["frontend"], addr["ready"])),
    ]
    to_tokenizer = PushQueue(addr["tokenizer-0"])
    try:
        for proc in procs:
            proc.start()
        waiting = {proc.name for proc in procs}
        while waiting:
            for msg in ready.get(timeout=1.0):
                assert isinstance(msg, ReadyMsg) and msg.error is None, msg
                print(f"{msg.name} is ready")
                waiting.discard(msg.name)
            for proc in procs:
                if not proc.is_alive():
                    raise SystemExit(f"{proc.name} exited (code {proc.exitcode})")

        params = SamplingParams(temperature=0.0, max_tokens=32)
        to_tokenizer.put([TokenizeMsg(0, params, messages=[{"role": "user", "content": QUESTION}])])
        print(f"\nQ: {QUESTION}\nA: ", end="", flush=True)
        pieces: list[str] = []
        while True:
            for reply in frontend.get(timeout=1.0):
                assert isinstance(reply, UserReply)
                pieces.append(reply.text)
                print(reply.text, end="", flush=True)
                if reply.finished:
                    print(f"\n\n{len(pieces)} replies {pieces}\nfinish_reason={reply.finish_reason}"
                          f", prompt_tokens={reply.prompt_tokens}")
                    return
            if not all(proc.is_alive() for proc in procs):
                raise SystemExit("a worker died")
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()  # SIGTERM: each worker leaves through SystemExit
        for proc in procs:
            if proc.pid is None:  # never started
                continue
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        print("stopped:", {proc.name: proc.exitcode for proc in procs})
        for q in (ready, frontend, to_tokenizer):
            q.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - began:.1f} s")
