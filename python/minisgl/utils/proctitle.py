"""Name each process of the server in `ps`, `top` and /proc, as SGLang and vLLM do.

Every worker is started by `multiprocessing` with the same command line (`python -c "from
multiprocessing.spawn import ..."`), so without a title nothing tells the scheduler from a
tokenizer when a process hangs or eats memory. The title replaces the command line
(/proc/PID/cmdline) and, cut to 15 bytes by the kernel, the short name (/proc/PID/comm) that
`top` shows. It also hides the launcher's flags from other users of the machine, --api-key
among them.
"""

from __future__ import annotations

import setproctitle

TITLE_PREFIX = "minisgl::"


def set_process_title(name: str) -> str:
    """Call this process `minisgl::<name>`; returns the title."""
    title = TITLE_PREFIX + name
    setproctitle.setproctitle(title)
    return title
