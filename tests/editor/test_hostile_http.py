"""The editor's HTTP server under hostile requests (#12): Origin and Host on every request, a real backlog,
and a one-line JSON 4xx for every bad request, never a 5xx or http.server's HTML page."""

import concurrent.futures
import json
import socket
import threading

import pytest

from tensorcad.editor.server import EditorServer, Handler, make_server


@pytest.fixture(scope="module")
def server():
    httpd, _ = make_server()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def exchange(server, data: bytes, timeout=20) -> tuple[int, dict | None]:
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data.replace(b"{PORT}", str(port).encode()))
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    length = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    body = body[: length[0]] if length else body
    return status, json.loads(body) if body.startswith(b"{") else None


GOOD = b"Host: 127.0.0.1:{PORT}\r\n"


@pytest.mark.parametrize("origin", [b"http://evil.example", b"null", b"https://127.0.0.1:{PORT}",
                                    b"http://127.0.0.1:{PORT}.evil.example"])
@pytest.mark.parametrize("method", [b"GET /api/presets", b"POST /api/validate", b"DELETE /"])
def test_a_foreign_origin_is_refused_on_every_method(server, method, origin):
    body = b'{"design": "nano-sort"}'
    status, error = exchange(server, method + b" HTTP/1.1\r\n" + GOOD + b"Origin: " + origin +
                             b"\r\nContent-Type: application/json\r\nContent-Length: 23\r\n\r\n" + body)
    assert status == 403 and "Origin" in error["error"]


def test_the_editor_s_own_origin_is_served(server):
    status, answer = exchange(server, b"GET /api/catalog HTTP/1.1\r\n" + GOOD + b"Origin: http://127.0.0.1:{PORT}\r\n\r\n")
    assert status == 200 and "kinds" in answer


@pytest.mark.parametrize("request_line,status", [
    (b"BREW /api/presets HTTP/1.1", 405),  # http.server: 501
    (b"GET /api/presets HTTP/2.0", 400),  # http.server: 505
    (b"GARBAGE", 400),  # http.server: an HTML page, or no status line at all for HTTP/0.9
    (b"GET / HTTP/1.1 extra", 400),
])
def test_http_server_s_own_refusals_are_one_line_json_4xx(server, request_line, status):
    got, error = exchange(server, request_line + b"\r\n" + GOOD + b"\r\n")
    assert got == status and "\n" not in error["error"]


@pytest.mark.parametrize("length", [b"\xd9\xa3", b"-1", b"12abc", b"1 2"])
def test_a_content_length_that_is_not_ascii_digits_is_411(server, length):
    status, _ = exchange(server, b"POST /api/validate HTTP/1.1\r\n" + GOOD + b"Content-Type: application/json\r\n"
                         b"Content-Length: " + length + b"\r\n\r\n{}")
    assert status == 411


def test_a_body_shorter_than_its_length_is_400_not_a_wait_past_the_timeout(server, monkeypatch):
    monkeypatch.setattr(Handler, "timeout", 2)
    status, error = exchange(server, b"POST /api/validate HTTP/1.1\r\n" + GOOD + b"Content-Type: application/json\r\n"
                             b"Content-Length: 50\r\n\r\n{}")
    assert status == 400 and "ended after 2 of the 50 bytes" in error["error"]


def test_an_unread_body_is_never_taken_for_the_next_request(server):
    smuggled = b"GET /api/initial HTTP/1.1\r\n" + GOOD + b"\r\n"
    data = (b"DELETE / HTTP/1.1\r\n" + GOOD + b"Content-Length: " + str(len(smuggled)).encode() + b"\r\n\r\n"
            + smuggled)
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(data.replace(b"{PORT}", str(port).encode()))
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.count(b"HTTP/1.") == 1 and answer.startswith(b"HTTP/1.1 405")


@pytest.mark.parametrize("body", [b'{"design": "nano-sort", "op": {"seq": 16777216}}',
                                  b'{"design": "nano-sort", "op": {"seq": 8192, "packing": {"mean": 1e-9}}}',
                                  b'{"text": "{\\"a\\": 1, \\"a\\": 2}"}', b'{"design": {"name": "\\n"}}',
                                  b'{"design": "nano-sort", "op": {"hardware": ["H100"]}}'])
def test_bad_input_found_by_the_fuzz_suite_is_400(server, body):
    status, error = exchange(server, b"POST /api/analyze HTTP/1.1\r\n" + GOOD + b"Content-Type: application/json\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert status == 400 and "\n" not in error["error"] and error["path"]


def test_the_listen_backlog_holds_a_burst_of_clients():
    assert EditorServer.request_queue_size >= 128
    httpd, _ = make_server()
    port = httpd.server_address[1]
    # Nobody accepts yet: connections wait in the backlog, which socketserver's 5 would overflow and reset.
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(64)]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        def ask(s):
            s.sendall(f"GET /static/none HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            return s.recv(64)

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(ask, sockets))
        assert all(a.startswith(b"HTTP/1.1 404") for a in answers)
    finally:
        for s in sockets:
            s.close()
        httpd.shutdown()
        httpd.server_close()


# -- round three (#32) ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hosts", [b"Host: 127.0.0.1:{PORT}\r\nHost: evil.example\r\n",
                                   b"Host: evil.example\r\nHost: 127.0.0.1:{PORT}\r\n",
                                   b"Host: 127.0.0.1:{PORT}\r\nHost: 127.0.0.1:{PORT}\r\n"])
def test_two_host_headers_are_refused_whichever_comes_first(server, hosts):
    status, error = exchange(server, b"GET /api/presets HTTP/1.1\r\n" + hosts + b"\r\n")
    assert status == 403 and "127.0.0.1" in error["error"]


def held_open(server, data: bytes, seconds: float, trickle: bool = True) -> tuple[bytes, float]:
    """Send ``data`` (with ``trickle``, a byte every 50 ms past the first 8), keep the connection open, and read
    what comes back."""
    import time

    port = server.server_address[1]
    data = data.replace(b"{PORT}", str(port).encode())
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as s:
        s.sendall(data[:8] if trickle else data)
        for byte in data[8:] if trickle else b"":
            try:
                s.send(bytes([byte]))
            except OSError:  # the server closed the reading side: it stopped listening, as it should
                break
            time.sleep(0.05)
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except TimeoutError:
            pass
    return answer, time.monotonic() - started


def test_a_trickling_client_is_answered_and_closed_at_the_deadline(server, monkeypatch):
    monkeypatch.setattr(Handler, "timeout", 2)  # 15 s in use; the same code
    body = b'{"design": "nano-sort"}'
    trickle = (b"POST /api/validate HTTP/1.1\r\n" + GOOD + b"Content-Type: application/json\r\n"
               b"Content-Length: 23\r\n\r\n" + body)  # 100 bytes at 20 a second: 5 s, every read within 2 s
    answer, seconds = held_open(server, trickle, 30)
    assert answer.startswith(b"HTTP/1.1 4") and seconds < 12, (answer[:80], seconds)  # before: 200 after 5 s


def test_a_body_shorter_than_its_length_on_an_open_connection_is_4xx(server, monkeypatch):
    monkeypatch.setattr(Handler, "timeout", 2)
    short = (b"POST /api/validate HTTP/1.1\r\n" + GOOD + b"Content-Type: application/json\r\n"
             b"Content-Length: 50\r\n\r\n{}")
    answer, seconds = held_open(server, short, 30, trickle=False)
    assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 408")), answer[:80]  # before: closed without a word
    # 400 "ended after 2 of the 50 bytes", or 408 "stopped arriving before the 50 bytes" when the read times out first
    assert b"the 50 bytes" in answer and seconds < 12


def test_connections_past_the_cap_are_429_and_the_editor_serves_again_after():
    from tensorcad.editor.server import MAX_CONNECTIONS

    httpd, _ = make_server()
    port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    half_open = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        ask = f"GET /api/presets HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
        import time

        time.sleep(0.5)  # every half-open one accepted, each holding its thread
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(ask)
            assert s.recv(64).startswith(b"HTTP/1.1 429")
        for s in half_open:
            s.close()
        half_open = []
        deadline = time.monotonic() + 10
        while True:  # the slots come back as the threads see their connections end
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(ask)
                answer = s.recv(64)
            if answer.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert answer.startswith(b"HTTP/1.1 200"), answer
    finally:
        for s in half_open:
            s.close()
        httpd.shutdown()
        httpd.server_close()


def test_a_request_integer_of_5000_digits_is_400_saying_so(server):
    body = b'{"design": ' + b"9" * 5000 + b"}"
    status, error = exchange(server, b"POST /api/validate HTTP/1.1\r\n" + GOOD + b"Content-Type: application/json\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert status == 400 and "4300 digits" in error["error"] and "UTF-8" not in error["error"]
