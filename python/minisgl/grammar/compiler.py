"""Compiling grammars against the model's vocabulary, off the scheduler's critical path.

A grammar (spec.py) speaks of characters; sampling picks tokens. XGrammar compiles a grammar
into a pushdown automaton whose states already know which of the vocabulary's tokens can follow
(most tokens are decided once, at compile time; only the few whose fate depends on the stack are
checked per step). That compile takes milliseconds for a small schema and can take far longer
than a decode step for a large one, so it runs on a worker thread: the scheduler hands a request's
grammar over, keeps stepping the other requests, and admits the request once its future is done.
XGrammar's compile runs in C++ without holding the GIL, so the thread really runs beside the loop.

Compiled grammars are cached by their (kind, text) key: a server that sees the same schema on
every request of an application compiles it once. The vocabulary description (TokenizerInfo)
needs the tokenizer, which the scheduler's process does not load otherwise: the first grammar
loads it, on the worker thread too.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from minisgl.utils import init_logger

from .spec import GrammarKey

logger = init_logger(__name__)

MAX_CACHED_GRAMMARS = 256  # compiled grammars kept (a JSON schema's is tens of kilobytes)


class GrammarCompiler:
    """Futures of compiled grammars, one compile per distinct key while it stays cached."""

    def __init__(self, model_path: str, vocab_size: int, stop_token_ids: tuple[int, ...]) -> None:
        self.model_path = model_path
        self.vocab_size = vocab_size  # the model's logits width (can exceed the tokenizer's)
        self.stop_token_ids = list(stop_token_ids)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar")
        self._cache: OrderedDict[GrammarKey, Future[Any]] = OrderedDict()
        self._xgr_compiler: Any = None  # built by the first compile, on the worker thread
        self._lock = threading.Lock()  # the cache is touched by the loop and by done-callbacks
        self.compiles = 0
        self.hits = 0

    def prepare(self) -> None:
        """Build the vocabulary description now, on the worker thread, rather than for the
        first grammar: for Qwen3's 151,936 tokens it took 13 s on the H200's host."""
        self._pool.submit(self._compiler)

    def compile(self, key: GrammarKey) -> Future[Any]:
        """The compiled grammar of `key`, as a future (done at once on a cache hit)."""
        with self._lock:
            future = self._cache.get(key)
            if future is not None and not (future.done() and future.exception() is not None):
                self._cache.move_to_end(key)
                self.hits += 1
                return future
            future = self._pool.submit(self._compile, key)
            self._cache[key] = future
            self.compiles += 1
            while len(self._cache) > MAX_CACHED_GRAMMARS:
                self._cache.popitem(last=False)
            return future

    def _compile(self, key: GrammarKey) -> Any:
        compiler = self._compiler()
        if key.kind == "json_schema":
            # Compact JSON (no free whitespace): a small model left free to emit spaces can emit
            # them until max_tokens, and the answer never closes.
            return compiler.compile_json_schema(key.text, any_whitespace=False)
        if key.kind == "regex":
            return compiler.compile_regex(key.text)
        return compiler.compile_grammar(key.text)

    def _compiler(self) -> Any:
        if self._xgr_compiler is None:
            import xgrammar as xgr

            from minisgl.tokenizer import load_tokenizer

            hf = load_tokenizer(self.model_path).hf
            info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=self.vocab_size,
                                                      stop_token_ids=self.stop_token_ids)
            # Our own cache keeps the futures; XGrammar's would keep a second copy.
            self._xgr_compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
            logger.info("grammar compiler ready (%s vocabulary of %d tokens)",
                        info.vocab_type.name.lower(), self.vocab_size)
        return self._xgr_compiler

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
