"""An HTTP proxy that does what a network and a busy object store do wrong,
on cue: answers a share of requests with S3's 503 SlowDown, cuts a share of
bodies short (a reset mid-body), holds a share of first bytes back. Between
a client and an S3 endpoint (moto, nginx) on loopback; it forwards requests
as they came, Host header included, so signatures still hold.

    proxy = FaultProxy("http://127.0.0.1:5000", slow_down=0.1, reset=0.02)
    proxy.start()          # proxy.url: "http://127.0.0.1:PORT"
    ...
    proxy.stop()           # proxy.counts: what it did

Standard library only.
"""

import http.client
import http.server
import random
import socket
import threading
import time
import urllib.parse

SLOW_DOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                  b'<Message>Please reduce your request rate.</Message></Error>')


class FaultProxy:
    def __init__(self, upstream, slow_down=0.0, reset=0.0, delay=0.0, delay_seconds=1.0,
                 seed=0):
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname, parsed.port or 80)
        self.slow_down, self.reset, self.delay = slow_down, reset, delay
        self.delay_seconds = delay_seconds
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.counts = {"requests": 0, "slow_down": 0, "reset": 0, "delayed": 0}
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy._forward(self)

            do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # the resets it makes itself

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def _draw(self):
        with self.lock:
            self.counts["requests"] += 1
            draw = self.random.random()
            if draw < self.slow_down:
                self.counts["slow_down"] += 1
                return "slow_down"
            draw -= self.slow_down
            if draw < self.reset:
                self.counts["reset"] += 1
                return "reset"
            draw -= self.reset
            if draw < self.delay:
                self.counts["delayed"] += 1
                return "delay"
            return None

    def _forward(self, handler):
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        fault = self._draw()
        if fault == "slow_down":
            handler.send_response(503)
            handler.send_header("Content-Type", "application/xml")
            handler.send_header("Content-Length", str(len(SLOW_DOWN_BODY)))
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(SLOW_DOWN_BODY)
            return
        if fault == "delay":
            time.sleep(self.delay_seconds)
        upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            upstream.putrequest(handler.command, handler.path, skip_host=True,
                                skip_accept_encoding=True)
            for name, value in handler.headers.items():
                upstream.putheader(name, value)
            upstream.endheaders(body)
            response = upstream.getresponse()
            payload = response.read()
        except OSError:
            handler.close_connection = True
            return
        finally:
            upstream.close()
        handler.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        if handler.command == "HEAD":
            return
        if fault == "reset" and len(payload) > 1:
            handler.wfile.write(payload[:len(payload) // 2])
            handler.wfile.flush()
            # RST rather than FIN: the client sees a reset mid-body.
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                          b"\x01\x00\x00\x00\x00\x00\x00\x00")
            handler.close_connection = True
            handler.connection.close()
            return
        handler.wfile.write(payload)
