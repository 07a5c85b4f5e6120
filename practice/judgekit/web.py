"""The judge's local web page: list, statement, editor, run, progress. Bound to 127.0.0.1 only.

    GET  /                            the page (static/: index.html, app.js, style.css and the
                                      vendored CodeMirror editor; nothing from a CDN)
    GET  /api/exercises               chapters and their exercises, each with its status
    GET  /api/exercises/<id>          statement (HTML), the learner's saved code or the starter
    GET  /api/exercises/<id>/submissions   earlier submissions, newest first (no source)
    GET  /api/submissions/<n>         one submission with its source, to reopen it
    POST /api/exercises/<id>/run      {"code": "..."} -> verdicts; saves the code to the workspace
                                      and records the submission (progress.py)

An exercise's old id (an alias, 202 for 1901) answers as the exercise itself.

Requests are validated: the Host header must name this server (no DNS rebinding), POST bodies must
be JSON (application/json, which a foreign page cannot send without a CORS preflight that we never
answer), at most MAX_BODY bytes, for an exercise id that exists. One judge run at a time.
"""

from __future__ import annotations

import html
import json
import re
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from . import progress
from .exercises import Exercise, by_chapter, chapter_titles, find_exercise
from .report import exercise_json, sandbox_line
from .runner import VERDICTS, judge, stop_all
from .text import safe_json

STATIC = Path(__file__).resolve().parent / "static"
CONTENT_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def _static_files() -> dict[str, tuple[str, str]]:
    """URL path -> (file under static/, content type), fixed when the server starts: the page
    serves exactly these files, so no URL can name anything else."""
    files = {"/": ("index.html", "text/html; charset=utf-8")}
    for file in sorted(STATIC.rglob("*")):
        rel = file.relative_to(STATIC).as_posix()
        if file.is_file() and file.suffix in CONTENT_TYPES:
            files[f"/static/{rel}"] = (rel, CONTENT_TYPES[file.suffix])
        elif file.is_file() and file.name == "LICENSE":
            files[f"/static/{rel}"] = (rel, "text/plain; charset=utf-8")
    return files


STATIC_FILES = _static_files()
MAX_BODY = 256 * 1024
MAX_CODE = 128 * 1024
_judge_lock = threading.Lock()


def render_markdown(text: str) -> str:
    try:
        import markdown
    except ImportError:  # the page still works, showing the Markdown source
        return f"<pre>{html.escape(text)}</pre>"
    return markdown.markdown(text, extensions=["fenced_code", "tables"])


def _saved_code(ex: Exercise) -> str:
    path = ex.workspace_file(create=False)
    if path.is_file():
        return path.read_text(encoding="utf-8", errors="replace")
    return ex.starter_code()


class Handler(BaseHTTPRequestHandler):
    server_version = "minisgl-judge"

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        if getattr(self.server, "verbose", True):
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")

    # ---- helpers ----------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy",
                         "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self'")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data) -> None:
        self._send(status, json.dumps(data, ensure_ascii=False).encode("utf-8"),
                   "application/json; charset=utf-8")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _host_ok(self) -> bool:
        port = self.server.server_address[1]
        host = (self.headers.get("Host") or "").lower()
        return host in {f"127.0.0.1:{port}", f"localhost:{port}"}

    def _exercise(self, raw_id: str) -> Exercise | None:
        return find_exercise(raw_id) if re.fullmatch(r"\d{1,6}", raw_id) else None

    # ---- GET --------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self._host_ok():
            return self._error(HTTPStatus.FORBIDDEN, "bad Host header")
        path = urlsplit(self.path).path
        if path == "/favicon.ico":
            return self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        if path in STATIC_FILES:
            name, content_type = STATIC_FILES[path]
            return self._send(HTTPStatus.OK, (STATIC / name).read_bytes(), content_type)
        if path == "/api/exercises":
            statuses, titles = progress.statuses(), chapter_titles()
            chapters = [
                {"chapter": ch, "title": titles.get(ch, ""),
                 "exercises": [{**exercise_json(e), **_status_json(statuses.get(e.id))}
                               for e in exs]}
                for ch, exs in by_chapter().items()
            ]
            return self._json(HTTPStatus.OK, {"chapters": chapters, "verdicts": VERDICTS})
        match = re.fullmatch(r"/api/exercises/([^/]+)/submissions", path)
        if match:
            ex = self._exercise(match.group(1))
            if ex is None:
                return self._error(HTTPStatus.NOT_FOUND, "no such exercise")
            return self._json(HTTPStatus.OK, {
                "submissions": [s.to_json() for s in progress.submissions(ex.id)]})
        match = re.fullmatch(r"/api/submissions/(\d{1,12})", path)
        if match:
            found = progress.submission(int(match.group(1)))
            if found is None:
                return self._error(HTTPStatus.NOT_FOUND, "no such submission")
            return self._json(HTTPStatus.OK, {**found.to_json(), "source": found.source})
        match = re.fullmatch(r"/api/exercises/([^/]+)", path)
        if match:
            ex = self._exercise(match.group(1))
            if ex is None:
                return self._error(HTTPStatus.NOT_FOUND, "no such exercise")
            return self._json(HTTPStatus.OK, {
                **exercise_json(ex),
                "statement_html": render_markdown(ex.statement()),
                "code": _saved_code(ex),
                "starter": ex.starter_code(),
                "passed": ex.id in progress.passed_ids(),
            })
        return self._error(HTTPStatus.NOT_FOUND, "not found")

    # ---- POST -------------------------------------------------------------------------------
    def do_POST(self) -> None:  # noqa: N802
        if not self._host_ok():
            return self._error(HTTPStatus.FORBIDDEN, "bad Host header")
        match = re.fullmatch(r"/api/exercises/([^/]+)/run", urlsplit(self.path).path)
        if not match:
            return self._error(HTTPStatus.NOT_FOUND, "not found")
        ex = self._exercise(match.group(1))
        if ex is None:
            return self._error(HTTPStatus.NOT_FOUND, "no such exercise")
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send application/json")
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            return self._error(HTTPStatus.LENGTH_REQUIRED, "Content-Length required")
        if length < 0 or length > MAX_BODY:
            return self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request too large")
        try:
            body = json.loads(self.rfile.read(length).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return self._error(HTTPStatus.BAD_REQUEST, "body is not JSON")
        code = body.get("code") if isinstance(body, dict) else None
        if not isinstance(code, str):
            return self._error(HTTPStatus.BAD_REQUEST, 'expected {"code": "..."}')
        if len(code.encode("utf-8")) > MAX_CODE:
            return self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "code too large")

        path = ex.workspace_file(create=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code, encoding="utf-8")
        try:
            with _judge_lock:
                result = judge(ex, code)
        except Exception as e:  # noqa: BLE001 - the judge's own failure: an answer, not a hang-up
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR,
                               f"评测机出错：{type(e).__name__}")
        progress.record(ex.id, [c.verdict for c in result.cases], code, "web")
        data = safe_json(result.to_json())  # program output, escaped (runner does it; again here)
        data["summary"] = f"结果：{result.passed}/{len(result.cases)} 通过"
        data["sandbox_line"] = sandbox_line(result)
        data["ever_passed"] = ex.id in progress.passed_ids()
        return self._json(HTTPStatus.OK, data)


def _status_json(status: progress.ExerciseStatus | None) -> dict:
    if status is None:
        return {"passed": False, "attempts": 0, "best": "", "last_at": ""}
    return {"passed": status.passed, "attempts": status.attempts, "best": status.best,
            "last_at": status.last_at}


def make_server(port: int = 0, verbose: bool = True) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:port (0 picks a free port); call serve_forever() on it."""
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.verbose = verbose
    return server


def serve(port: int) -> None:
    server = make_server(port)
    print(f"练习题网页：http://127.0.0.1:{server.server_address[1]}/  （Ctrl+C 退出）", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        stop_all()  # a judge run in progress: kill its sandbox, remove its folder
