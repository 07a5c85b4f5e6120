"""Chapter 14: `python -m minisgl --shell`, driven through a pseudo-terminal like a person would.

The shell is greedy by default, and the naive prefix cache makes every prompt run the same code
path as the reference, so each answer must equal LLM.generate on the chat so far.
"""

from __future__ import annotations

import os
import sys

import pexpect
import pytest

from minisgl.core import SamplingParams
from minisgl.llm import LLM

MAX_TOKENS = 24
PROMPT = ">>> "


@pytest.fixture(scope="module")
def llm(smollm2_dir):
    ref = LLM(str(smollm2_dir), num_pages=2048, cache_type="naive")
    yield ref
    ref.shutdown()


def answer(llm: LLM, chat: list[dict[str, str]]) -> str:
    ids = llm.tokenizer.apply_chat_template(chat)
    return llm.generate([ids], SamplingParams(max_tokens=MAX_TOKENS), use_tqdm=False)[0]["text"]


def ask(shell: pexpect.spawn, question: str) -> str:
    shell.sendline(question)
    shell.expect_exact(PROMPT, timeout=120)
    lines = shell.before.replace("\r\n", "\n").split("\n")
    assert lines[0] == question  # the terminal echoes what was typed
    return "\n".join(lines[1:]).rstrip("\n")


def test_shell_answers_keeps_history_and_resets(smollm2_dir, llm):
    env = {**os.environ, "MINISGL_SHELL_MAX_TOKENS": str(MAX_TOKENS), "TERM": "dumb"}
    shell = pexpect.spawn(sys.executable, ["-m", "minisgl", "--model", str(smollm2_dir),
                                           "--shell", "--cache", "naive", "--num-pages", "2048"],
                          env=env, encoding="utf-8", timeout=300, dimensions=(50, 400))
    try:
        shell.expect_exact(PROMPT, timeout=300)
        q1, q2 = "What is the capital of France?", "What did I just ask you?"
        a1 = ask(shell, q1)
        assert a1 == answer(llm, [{"role": "user", "content": q1}])
        assert "Paris" in a1
        a2 = ask(shell, q2)  # the question only makes sense with the history
        assert a2 == answer(llm, [{"role": "user", "content": q1},
                                  {"role": "assistant", "content": a1},
                                  {"role": "user", "content": q2}])
        assert ask(shell, "/reset") == "(the conversation is cleared)"
        a3 = ask(shell, q2)
        assert a3 == answer(llm, [{"role": "user", "content": q2}])
        assert a3 != a2
        assert "unknown command" in ask(shell, "/nonsense")
        shell.sendline("/exit")
        shell.expect(pexpect.EOF, timeout=60)
    finally:
        shell.close(force=True)
    assert shell.exitstatus == 0


def test_ctrl_c_stops_an_answer_and_twice_at_the_prompt_leaves(smollm2_dir):
    """Ctrl-C while an answer streams stops it and returns to the prompt; the shell then
    answers the next question; /help lists the commands; Ctrl-C twice at the prompt exits 0."""
    env = {**os.environ, "MINISGL_SHELL_MAX_TOKENS": "600", "TERM": "dumb"}
    shell = pexpect.spawn(sys.executable, ["-m", "minisgl", "--model", str(smollm2_dir),
                                           "--shell", "--num-pages", "2048"],
                          env=env, encoding="utf-8", timeout=300, dimensions=(50, 400))
    try:
        shell.expect_exact(PROMPT, timeout=300)
        question = "Count from 1 to 300, separated by commas."
        shell.sendline(question)
        # The terminal echoes the question at once, before the shell has read it: a Ctrl-C then
        # would be one at the prompt (and the terminal drops the unread line). So wait for the
        # echo, then for digits that only the answer writes.
        shell.expect_exact(question, timeout=30)
        shell.expect(r"\d\d\d", timeout=120)  # the answer is streaming
        shell.sendintr()
        shell.expect_exact("(stopped)", timeout=60)
        shell.expect_exact(PROMPT, timeout=60)
        assert "Paris" in ask(shell, "What is the capital of France?")  # still answering
        listed = ask(shell, "/help")
        assert all(command in listed for command in ("/help", "/reset", "/exit"))
        shell.sendintr()
        shell.expect_exact("press Ctrl-C again", timeout=30)
        shell.expect_exact(PROMPT, timeout=30)
        shell.sendintr()
        shell.expect(pexpect.EOF, timeout=60)
    finally:
        shell.close(force=True)
    assert shell.exitstatus == 0
