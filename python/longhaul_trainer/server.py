"""The trainer protocol over HTTP (docs/serving.md, "Trainer protocol"):
the same six routes, status codes and bodies as train/remote's Go handler,
so train/remote.Client drives this process unchanged.

Calls reach the trainer one at a time (a lock), in arrival order; /health
answers without waiting. With torchrun, rank 0 serves HTTP and sends each
state-changing call (train_step, load_checkpoint) to the other ranks as a
broadcast command before running its own part."""

import hmac
import json
import logging
import math
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from . import batch as wire
from .batch import BadRequest, Invalid

log = logging.getLogger("longhaul_trainer")

OP_STOP, OP_STEP, OP_LOAD, OP_SAVE, OP_EXPORT, OP_WARM = 0, 1, 2, 3, 4, 5


def jfloat(x):
    """JSON has no NaN: non-finite floats travel as Python's spellings, as Go's jfloat reads them."""
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "Infinity" if x > 0 else "-Infinity"
    return x


class Peers:
    """Sends commands from rank 0 to the other ranks (no-op with one process)."""

    def __init__(self, world, device):
        self.world, self.device = world, device

    def send(self, op, payload=b""):
        if self.world == 1:
            return
        import torch.distributed as dist
        hdr = torch.tensor([op, len(payload)], dtype=torch.int64, device=self.device)
        dist.broadcast(hdr, 0)
        if payload:
            dist.broadcast(torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(self.device), 0)


def follow(trainer, device, export_dtype=None):
    """The loop of ranks > 0: run rank 0's commands until it says stop."""
    import torch.distributed as dist
    while True:
        hdr = torch.zeros(2, dtype=torch.int64, device=device)
        dist.broadcast(hdr, 0)
        op, n = int(hdr[0]), int(hdr[1])
        payload = b""
        if n:
            buf = torch.zeros(n, dtype=torch.uint8, device=device)
            dist.broadcast(buf, 0)
            payload = buf.cpu().numpy().tobytes()
        if op == OP_STOP:
            return
        if op == OP_STEP:
            trainer.train_step(wire.decode(payload))
        elif op == OP_WARM:
            trainer.warm_step(*wire.decode_warm(payload))
        elif op == OP_LOAD:
            trainer.load_checkpoint(payload.decode())
        elif op == OP_SAVE:  # FSDP: the shards are gathered by every rank
            _quiet(trainer.save_checkpoint, payload.decode())
        elif op == OP_EXPORT:
            _quiet(trainer.export_weights, payload.decode(), export_dtype)


def _quiet(fn, *args):
    """A follower's part of a call whose error rank 0 reports (rank 0 has
    already gathered with it; only rank 0 writes)."""
    try:
        fn(*args)
    except Invalid as e:
        log.warning("rank 0 refuses this call: %s", e)


class App:
    def __init__(self, trainer, peers, api_key="", max_body=1 << 30, export_dtype=None):
        self.t, self.peers, self.api_key, self.max_body, self.export_dtype = trainer, peers, api_key, max_body, export_dtype
        self.lock = threading.Lock()
        self.last_decode = self.last_step = 0.0  # seconds, for the overhead benchmark

    def train_step(self, body):
        t0 = time.perf_counter()
        b = wire.decode(body)  # 400 before any rank sees it
        decoded = time.perf_counter() - t0
        with self.lock:
            if b.expect_step >= 0 and self.t.step != b.expect_step:
                return 409, {"error": {"code": "step_conflict", "message": f"trainer is at step {self.t.step}, the batch expects step {b.expect_step}"},
                             "step": self.t.step, "version": self.t.version}
            self.t.check(b)  # 422 before any rank sees it
            t1 = time.perf_counter()
            self.peers.send(OP_STEP, body)
            stats = self.t.train_step(b)
            self.last_decode, self.last_step = decoded, time.perf_counter() - t1
            return 200, {k: jfloat(v) for k, v in stats.items()}

    def warm_step(self, body):
        """The warm start's supervised step (docs/protocols.md, "Trainer
        protocol: the warm start"), fenced by its index: a resent step that
        was applied, or a trainer that restarted and lost the warm start's
        progress, answers 409 with the trainer's warm_step to resume from."""
        b, w = wire.decode_warm(body)
        with self.lock:
            if self.t.step != 0:
                return 409, {"error": {"code": "warm_after_rl", "message": f"trainer is at RL step {self.t.step}: a warm start runs only before the first train_step"},
                             "step": self.t.step, "version": self.t.version, "warm_step": self.t.warm_done}
            if w.index != self.t.warm_done:
                return 409, {"error": {"code": "warm_conflict", "message": f"trainer has taken {self.t.warm_done} warm-start steps, the batch is step {w.index}"},
                             "step": self.t.step, "version": self.t.version, "warm_step": self.t.warm_done}
            self.t.check(b)
            self.peers.send(OP_WARM, body)
            stats = self.t.warm_step(b, w)
            return 200, {k: jfloat(v) for k, v in stats.items()}

    def path_call(self, route, body):
        field = "path" if route == "/v1/export_weights" else "dir"
        try:
            req = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BadRequest(f"body is not JSON: {e}") from None
        if not isinstance(req, dict):
            raise BadRequest("body must be a JSON object")
        v = req.get(field)
        if not isinstance(v, str) or v == "":
            raise BadRequest(f"{field!r} is required (a non-empty string)")
        expect = {}
        for key in ("expect_step", "expect_warm_step"):
            if key in req:
                e = req[key]
                if not isinstance(e, int) or isinstance(e, bool) or e < 0:
                    raise BadRequest(f"{key!r} must be a step (an integer >= 0)")
                expect[key] = e
        with self.lock:
            # The fence of a save or export: a trainer restarted after the
            # client last checked must not save or export its fresh state.
            if "expect_step" in expect and (self.t.step != expect["expect_step"] or
                                            expect.get("expect_warm_step", self.t.warm_done) != self.t.warm_done):
                return 409, {"error": {"code": "step_conflict", "message": f"trainer is at step {self.t.step} (warm-start step {self.t.warm_done}), the call expects step {expect['expect_step']}"},
                             "step": self.t.step, "version": self.t.version, "warm_step": self.t.warm_done}
            if self.t.all_ranks_io and route != "/v1/load_checkpoint":
                self.peers.send(OP_SAVE if route == "/v1/save_checkpoint" else OP_EXPORT, v.encode())
            if route == "/v1/save_checkpoint":
                self.t.save_checkpoint(v)
            elif route == "/v1/load_checkpoint":
                self.t.load_checkpoint(v)  # rank 0 first: a bad checkpoint is refused before the others try
                self.peers.send(OP_LOAD, v.encode())
            else:
                self.t.export_weights(v, self.export_dtype)
        return 200, {"ok": True}

    def state(self):
        with self.lock:
            return 200, {"step": self.t.step, "version": self.t.version, "warm_step": self.t.warm_done,
                         "last_decode_seconds": self.last_decode, "last_step_seconds": self.last_step}


ROUTES = {"/v1/train_step": "POST", "/v1/warm_step": "POST", "/v1/save_checkpoint": "POST", "/v1/load_checkpoint": "POST",
          "/v1/export_weights": "POST", "/v1/state": "GET", "/health": "GET"}


def err(status, code, msg):
    return status, {"error": {"message": msg, "code": code}}


def make_handler(app):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the Go client reuses connections

        def log_message(self, fmt, *args):
            log.debug("%s %s", self.address_string(), fmt % args)

        def reply(self, status, obj):
            b = (json.dumps(obj, allow_nan=False) + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            if self.close_connection:  # an unread body: the client must not reuse this connection
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b)

        def do_GET(self):
            self.route("GET")

        def do_POST(self):
            self.route("POST")

        def do_PUT(self):
            self.route("PUT")

        def do_DELETE(self):
            self.route("DELETE")

        def route(self, method):
            try:
                self.reply(*self.dispatch(method))
            except BrokenPipeError:
                pass

        def body(self):
            n = self.headers.get("Content-Length")
            if n is None:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    raise BadRequest("chunked bodies are not supported: send Content-Length")
                return b""
            try:
                n = int(n)
            except ValueError:
                raise BadRequest(f"Content-Length {n!r} is not an integer") from None
            if n < 0:
                raise BadRequest("Content-Length is negative")
            if n > app.max_body:
                self.close_connection = True  # the body stays unread
                raise TooLarge(f"body of {n} bytes exceeds {app.max_body}")
            return self.rfile.read(n)

        def dispatch(self, method):
            path = self.path.split("?", 1)[0]
            if app.api_key and path != "/health":
                got = self.headers.get("Authorization", "")
                if not (got.startswith("Bearer ") and hmac.compare_digest(got[7:].encode(), app.api_key.encode())):
                    self.close_connection = True
                    return err(401, "unauthorized", "missing or wrong bearer token")
            if path not in ROUTES:
                self.close_connection = True
                return err(404, "not_found", f"unknown route {method} {path}")
            if ROUTES[path] != method:
                self.close_connection = True
                return err(405, "method_not_allowed", f"{path} takes {ROUTES[path]}, not {method}")
            try:
                if path == "/health":
                    return 200, {"status": "ok"}
                if path == "/v1/state":
                    return app.state()
                body = self.body()
                if path == "/v1/train_step":
                    return app.train_step(body)
                if path == "/v1/warm_step":
                    return app.warm_step(body)
                return app.path_call(path, body)
            except TooLarge as e:
                return err(413, "too_large", str(e))
            except BadRequest as e:
                return err(400, "bad_batch" if path in ("/v1/train_step", "/v1/warm_step") else "bad_request", str(e))
            except Invalid as e:
                return err(422, "invalid", f"{path.removeprefix('/v1/')}: {e}")
            except Exception as e:  # a trainer fault, not the caller's: infra
                log.error("trainer call %s failed: %s", path, traceback.format_exc())
                return err(500, "trainer_error", f"{path.removeprefix('/v1/')}: {type(e).__name__}: {e}")

    return Handler


class TooLarge(Exception):
    pass


def serve(app, host, port, ready=None):
    httpd = ThreadingHTTPServer((host, port), make_handler(app))
    httpd.daemon_threads = True
    if ready:
        ready(httpd.server_address)
    return httpd
