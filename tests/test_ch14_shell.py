"""Chapter 14: `python -m minisgl --shell`, driven through a pseudo-terminal like a person would.

The shell is greedy by default, and the naive prefix cache makes every prompt run the same code
path as the reference, so each answer must equal LLM.generate on the chat so far.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pexpect
import pytest

from minisgl.core import SamplingParams
from minisgl.llm import LLM

MAX_TOKENS = 24
PROMPT = ">>> "
INFO_LINE = " INFO] "  # how a log line at INFO reads (utils/logger.py's format)


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


@pytest.mark.slow  # over 12 s on an idle 2-core machine
def test_shell_answers_keeps_history_and_resets(smollm2_dir, llm):
    env = {**os.environ, "MINISGL_SHELL_MAX_TOKENS": str(MAX_TOKENS), "TERM": "dumb"}
    shell = pexpect.spawn(sys.executable, ["-m", "minisgl", "--model", str(smollm2_dir),
                                           "--shell", "--cache", "naive", "--num-pages", "2048"],
                          env=env, encoding="utf-8", timeout=300, dimensions=(50, 400))
    try:
        shell.expect_exact(PROMPT, timeout=300)
        assert INFO_LINE not in shell.before  # the shell logs at WARNING (see --help)
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
        assert INFO_LINE not in shell.before  # nor on the way out ("server stopped")
    finally:
        shell.close(force=True)
    assert shell.exitstatus == 0


def test_shell_started_as_the_readme_says_prints_no_info_line(smollm2_dir):
    """`python -m minisgl --shell` with no model, `/exit` piped in: the default model's
    fallback line, the workers' and the launcher's INFO lines all stay out of the terminal."""
    env = {k: v for k, v in os.environ.items() if k != "MINISGL_LOG_LEVEL"}
    env["MINISGL_OFFLINE"] = "1"  # the fallback to the bundled SmolLM2 (smollm2_dir), no hub
    done = subprocess.run([sys.executable, "-m", "minisgl", "--shell", "--num-pages", "256"],
                          input="/exit\n", capture_output=True, text=True, env=env, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert PROMPT in done.stdout, out[-3000:]  # it reached the prompt, then left
    assert INFO_LINE not in out, out[-3000:]


@pytest.mark.parametrize("argv, environ, level", [
    (["--shell"], {}, "WARNING"),
    (["--shell-mode", "--port", "1"], {}, "WARNING"),
    (["--model", "m", "--shell", "--num-pages", "8"], {"MINISGL_LOG_LEVEL": ""}, "WARNING"),
    (["--shell", "--log-level", "info"], {}, None),  # asked for: kept
    (["--shell"], {"MINISGL_LOG_LEVEL": "INFO"}, None),  # the environment's choice: kept
    ([], {}, None),  # the server logs at INFO
    (["--help"], {}, None),  # left to the real parse, which prints the help once
    (["--shell", "--no-such-flag"], {}, "WARNING"),
])
def test_the_shells_log_level_is_decided_before_the_model_is_resolved(argv, environ, level,
                                                                       capsys):
    from minisgl.server.launch import shell_log_level

    assert shell_log_level(argv, environ) == level
    assert capsys.readouterr() == ("", "")


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
