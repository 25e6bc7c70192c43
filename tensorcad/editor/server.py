"""The editor's HTTP server: the static front end and the JSON API, on 127.0.0.1 only.

Standard library only (``http.server``). What it refuses, and why:

- any host but 127.0.0.1 (``TensorcadError``): the editor is for the person
  at this machine, and has no authentication;
- a ``Host`` header naming anything but this machine (403), so a web page
  that rebinds its own name to 127.0.0.1 cannot talk to it, and an
  ``Origin`` header naming any page but the editor's own (403), so another
  site open in the same browser cannot drive it; both on every request;
- POST bodies that are not ``application/json`` (415), which a page from
  another origin cannot send without asking first; bodies past
  ``MAX_BODY`` (413) or without a length (411);
- methods other than GET and POST (405);
- any static path that is not one of the files shipped in ``static/``
  (404): names are matched against the folder's listing, never joined
  onto a path, so ``..`` cannot climb out.

Bad input is HTTP 400 ``{"error": "path: message", "path": "path"}``, the
``TensorcadError``'s own words, and a malformed request (a bad request
line, too many headers, a body that never arrives within ``Handler.timeout``)
is a 4xx with the same one-line JSON, never http.server's HTML page; only a
bug is a 500, with one line (the traceback goes to the server's log). The
listen backlog is ``EditorServer.request_queue_size`` (128), so a burst of
clients queues instead of being reset.

Time and connections are bounded: a request must arrive whole (request line,
headers and body) within ``Handler.timeout`` seconds of the connection's last
answer, however it trickles (a timer closes the reading side, and a body cut
short is a 400); a body that stops arriving is a 408; past
``MAX_CONNECTIONS`` open connections a new one is answered 429 and closed.
A request with two ``Host`` headers is refused (403): which one a proxy
read is not known.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

from tensorcad.errors import TensorcadError, one_line, shown

from . import api

HOST = "127.0.0.1"
MAX_BODY = 4 * 1024 * 1024
# Connections held at once: each is a thread; past this a half-open crowd could hold them all.
MAX_CONNECTIONS = 64
STATIC = Path(__file__).resolve().parent / "static"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}
# Nothing is fetched from anywhere but this server; inline scripts are not run.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                               "script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def static_files() -> dict[str, Path]:
    """The files the server may send, by name: exactly what ``static/`` holds."""
    return {p.name: p for p in STATIC.iterdir() if p.is_file() and p.suffix in TYPES}


class EditorServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's default of 5 resets connections past a handful of clients
    initial: dict | None = None  # the design the editor opens with ({design, context}), if one was given
    files: dict[str, Path] = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            # Answered here, on the accepting thread, in one write: no thread is spent on it.
            body = b'{"error": "too many connections to the editor; try again", "path": ""}'
            try:
                request.sendall(b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                                b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" +
                                body)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class Handler(BaseHTTPRequestHandler):
    server: EditorServer
    server_version = "tensorcad-editor"
    protocol_version = "HTTP/1.1"
    timeout = 15  # seconds a connection may sit idle or trickle a body before it is closed

    GET_ROUTES: dict[str, Callable[["Handler", dict], Any]] = {
        "/api/presets": lambda self, q: api.presets(),
        "/api/design": lambda self, q: api.design(q.get("name", [None])[0]),
        "/api/catalog": lambda self, q: api.catalog(),
        "/api/initial": lambda self, q: self.server.initial or {"design": None},
    }
    POST_ROUTES: dict[str, Callable[[Any], Any]] = {
        "/api/validate": api.validate,
        "/api/analyze": api.analyze,
        "/api/rules": api.rules,
        "/api/preview": api.preview,
        "/api/operating-point": api.check_op,
        "/api/chart": api.chart,
        "/api/lengths": api.lengths,
    }

    # -- responses -------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str, extra: dict | None = None) -> None:
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"  # answer with a status line and headers, never bare HTTP/0.9
            self.close_connection = True
        headers = getattr(self, "headers", None)
        if self.command != "POST" and headers is not None and (headers.get("Content-Length")
                                                               or headers.get("Transfer-Encoding")):
            self.close_connection = True  # a body that is not read must not be taken for the next request
        if self.close_connection:
            extra = {**(extra or {}), "Connection": "close"}  # and the client is told so
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(key, value)
        try:
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client left first: nothing to answer
            self.close_connection = True

    def _json(self, status: int, payload: Any, extra: dict | None = None) -> None:
        self._send(status, json.dumps(payload).encode("utf-8"), "application/json", extra)

    def _refuse(self, status: HTTPStatus, message: str, close: bool = False) -> None:
        if close:
            self.close_connection = True
        self._json(status, {"error": message, "path": ""},
                   {"Connection": "close"} if close else None)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (bad request line, headers too long...) as one-line JSON."""
        try:
            short, _ = self.responses.get(code, ("error", ""))
        except AttributeError:  # pragma: no cover
            short = "error"
        self.close_connection = True
        # http.server answers an unknown method with 501 and an unknown version with 505: bad input, so 4xx.
        if code == HTTPStatus.NOT_IMPLEMENTED:
            code, short, message = HTTPStatus.METHOD_NOT_ALLOWED, "Method Not Allowed", \
                f"{shown(getattr(self, 'command', '') or '')} is not allowed (GET, POST)"
        elif code == HTTPStatus.HTTP_VERSION_NOT_SUPPORTED:
            code, short = HTTPStatus.BAD_REQUEST, "Bad Request"
        if getattr(self, "command", None) is None:
            self.command = "GET"  # a request line too broken to name a method still gets a body
        self._json(code, {"error": one_line(f"{short}: {message or short}")[:300], "path": ""},
                   {"Connection": "close"})

    # -- the deadline ----------------------------------------------------------

    def handle_one_request(self) -> None:
        # One deadline for the whole request, not one per read: a client trickling a byte every few
        # seconds was never closed. When it passes, the reading side is shut (reads see the end).
        self._deadline = threading.Timer(self.timeout, self._stop_reading)
        self._deadline.daemon = True
        self._deadline.start()
        try:
            super().handle_one_request()
        finally:
            self._deadline.cancel()

    def _stop_reading(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def _read_all(self) -> None:
        """The request is in: what follows (the work, the answer) is not on the reading deadline."""
        self._deadline.cancel()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)

    # -- guards ----------------------------------------------------------------

    def _host_ok(self) -> bool:
        hosts = self.headers.get_all("Host") or []
        port = self.server.server_address[1]
        # Exactly one: with two, this server read the first and a proxy in front may have read the other.
        return len(hosts) == 1 and hosts[0].strip().lower() in (f"{HOST}:{port}", f"localhost:{port}")

    def _origin_ok(self) -> bool:
        """No Origin (a tool, not a page), or the editor's own page; ``null`` and every other site refused."""
        origins = self.headers.get_all("Origin") or []
        port = self.server.server_address[1]
        return all(o.strip().lower() in (f"http://{HOST}:{port}", f"http://localhost:{port}") for o in origins)

    def _guarded(self) -> bool:
        """Host and Origin, checked on every request of every method; False when refused."""
        if not self._host_ok():
            self._refuse(HTTPStatus.FORBIDDEN, "this server answers only to 127.0.0.1", close=True)
            return False
        if not self._origin_ok():
            self._refuse(HTTPStatus.FORBIDDEN, "requests from other sites are refused (Origin is not this editor)",
                         close=True)
            return False
        return True

    def _call(self, fn: Callable[[], Any]) -> None:
        try:
            self._json(HTTPStatus.OK, fn())
        except TensorcadError as e:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(e), "path": e.path})
        except Exception as e:  # a bug: one line to the page, the traceback to the log
            traceback.print_exc(file=sys.stderr)
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR,
                       {"error": f"internal error ({type(e).__name__}); see the server's log", "path": ""})

    # -- methods ---------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._read_all()
        if not self._guarded():
            return
        if self.headers.get("Content-Length") or self.headers.get("Transfer-Encoding"):
            self.close_connection = True  # a GET's body is not read, so the connection cannot be reused
        url = urlsplit(self.path)
        route = self.GET_ROUTES.get(url.path)
        if route is not None:
            query = parse_qs(url.query)
            return self._call(lambda: route(self, query))
        if url.path == "/":
            return self._static("index.html")
        if url.path.startswith("/static/"):
            return self._static(unquote(url.path[len("/static/"):]))
        self._refuse(HTTPStatus.NOT_FOUND, f"no such page: {shown(url.path)}")

    def _static(self, name: str) -> None:
        path = self.server.files.get(name)  # exact names only: no joining, no '..'
        if path is None:
            return self._refuse(HTTPStatus.NOT_FOUND, "no such file")
        self._send(HTTPStatus.OK, path.read_bytes(), TYPES[path.suffix])

    def do_POST(self) -> None:  # noqa: N802
        if not self._guarded():
            return
        route = self.POST_ROUTES.get(urlsplit(self.path).path)
        length_text = self.headers.get("Content-Length")
        if length_text is None or not re.fullmatch(r"[0-9]{1,18}", length_text.strip()) \
                or len(self.headers.get_all("Content-Length") or []) > 1:
            return self._refuse(HTTPStatus.LENGTH_REQUIRED, "a request body needs a Content-Length",
                                close=True)
        length = int(length_text)
        if length > MAX_BODY:
            # Not read: the connection is closed instead of draining megabytes.
            return self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"request body of {length:,} bytes; at most {MAX_BODY:,}", close=True)
        try:
            data = self.rfile.read(length)
        except TimeoutError:  # it stopped arriving: answered, not dropped without a word
            return self._refuse(HTTPStatus.REQUEST_TIMEOUT, f"the body stopped arriving before the "
                                                            f"{length:,} bytes its Content-Length promised", close=True)
        self._read_all()
        if len(data) < length:
            return self._refuse(HTTPStatus.BAD_REQUEST, f"the body ended after {len(data):,} of the "
                                                        f"{length:,} bytes its Content-Length promised", close=True)
        if route is None:
            return self._refuse(HTTPStatus.NOT_FOUND, f"no such endpoint: {shown(self.path)}")
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            return self._refuse(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send the body as application/json")
        try:
            body = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            detail = (f"{e.msg} at line {e.lineno}, column {e.colno}" if isinstance(e, json.JSONDecodeError)
                      else "not UTF-8" if isinstance(e, UnicodeDecodeError)
                      else one_line(str(e).split(";")[0]))  # an integer of 5,000 digits
            return self._json(HTTPStatus.BAD_REQUEST, {"error": f"the request is not JSON: {detail}", "path": ""})
        except RecursionError:
            return self._json(HTTPStatus.BAD_REQUEST, {"error": "the request nests too deeply", "path": ""})
        self._call(lambda: route(body))

    def _not_allowed(self) -> None:
        if not self._guarded():
            return
        self._refuse(HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} is not allowed (GET, POST)")

    do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed


def make_server(design: Any = None, port: int = 0, host: str = HOST) -> tuple[EditorServer, str]:
    """A server bound to 127.0.0.1 (not yet serving) and its URL; ``port=0`` picks a free port."""
    if host != HOST:
        raise TensorcadError("host", f"the editor listens on {HOST} only, not {shown(host)}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise TensorcadError("port", f"expected an integer in [0, 65535], got {shown(port)}")
    initial = None
    if design is not None:
        from tensorcad.design import load

        loaded = load(design)  # a bad design fails here, before anything listens
        initial = {"design": loaded.to_dict(), "context": loaded.context}
    try:
        server = EditorServer((HOST, port), Handler)
    except OSError as e:
        raise TensorcadError("port", f"cannot listen on {HOST}:{port} ({e.strerror})") from None
    server.initial = initial
    server.files = static_files()
    return server, f"http://{HOST}:{server.server_address[1]}/"
