"""Shared helpers of the end-to-end tests: start `sluice serve` on a free loopback port,
talk HTTP/1.1 keep-alive with the standard library, read golden fixtures."""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

ARGS = None


def parse_args():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--sluice", required=True)
    p.add_argument("--fixtures", required=True)
    ARGS = p.parse_args()
    return ARGS


def sanitized():
    """Whether the sluice binary is built with ASan + UBSan (the asan preset)."""
    try:
        ldd = subprocess.run(["ldd", ARGS.sluice], capture_output=True, text=True).stdout
    except OSError:
        return False
    return "libasan" in ldd


def rss_meaningful():
    """Whether RSS growth measures what the tests mean (memory kept per request or per load):
    not for a binary built with ASan (the asan preset) while its quarantine is on, which holds
    freed memory back (up to 256 MB) to catch use-after-free; LeakSanitizer checks leaks at exit
    instead. scripts/asan-check re-runs the RSS tests with ASAN_OPTIONS quarantine_size_mb=0."""
    if not sanitized():
        return True
    return "quarantine_size_mb=0" in os.environ.get("ASAN_OPTIONS", "")


def model_dir(name):
    if os.path.isabs(name):
        return name
    return os.path.join(ARGS.fixtures, "models", name)


def golden(name):
    with open(os.path.join(ARGS.fixtures, "golden", name + ".json")) as f:
        return json.load(f)


class Server:
    """`sluice serve` on 127.0.0.1 with --port 0; the port is read from its log."""

    def __init__(self, model, *extra, timeout=120, preexec_fn=None, cmd=None, env=None):
        # model None: the models come in `extra` (--model NAME=PATH, --model-repository);
        # cmd: another command line that starts the server (scripts/serve-demo).
        if cmd is None:
            cmd = [ARGS.sluice, "serve"] + (["--model", model_dir(model)] if model else []) + \
                ["--port", "0", "--threads", "1"] + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, preexec_fn=preexec_fn, env=env)
        self.log = []
        self.port = None
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.log.append(line)
                m = re.search(r"ready: listening on http://[\d.]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self.thread = threading.Thread(target=pump, daemon=True)
        self.thread.start()
        if not ready.wait(timeout) or self.port is None:
            self.stop()
            raise RuntimeError("server did not start:\n" + "".join(self.log))

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, conn=None, raw=False):
        """Returns (status, headers dict, parsed JSON or text)."""
        c = conn or self.conn()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        if conn is None:
            c.close()
        if raw:
            return r.status, hdrs, data
        if hdrs.get("content-type", "").startswith("application/json"):
            return r.status, hdrs, json.loads(data)
        return r.status, hdrs, data.decode()

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def metrics(self):
        """Every series by its key; also, for series labelled with model and version, the
        key without those two labels, summed over models and versions (the one-model
        view: 'sluice_requests_total{route="/score",code="200"}')."""
        _, _, text = self.get("/metrics")
        out, summed = {}, {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
            bare = re.sub(r'(model|version)="(?:[^"\\]|\\.)*",?', "", key)
            bare = bare.replace(",}", "}").replace("{}", "")
            if bare != key:
                summed[bare] = summed.get(bare, 0) + float(value)
        for key, value in summed.items():
            out[key] = out.get(key, 0) + value
        return out

    def logged(self, *needles, timeout=5.0):
        """True once a server log line contains one of `needles`. The log is read by a
        thread, so a line written just before a response may not be in self.log yet."""
        def seen():
            return any(n in line for line in list(self.log) for n in needles)
        deadline = time.time() + timeout
        while not seen():
            if time.time() > deadline or self.proc.poll() is not None:
                return seen()
            time.sleep(0.02)
        return True

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout=60):
        rc = self.proc.wait(timeout)
        self.thread.join(5)
        return rc

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_fails(*args):
    """`sluice serve` with the models and flags in `args` (no --model of its own): the start-up
    error it stopped with, or "" if it started."""
    try:
        with Server(None, *args):
            return ""
    except RuntimeError as e:
        return str(e)


class Checker:
    def __init__(self):
        self.failures = 0
        self.checks = 0

    def check(self, cond, what):
        self.checks += 1
        if not cond:
            self.failures += 1
            print("FAIL:", what, flush=True)

    def close(self, value, want, tol, what):
        if isinstance(want, list):
            ok = isinstance(value, list) and len(value) == len(want)
            diff = max((abs(a - b) for a, b in zip(value, want)), default=0) if ok else None
            self.check(ok and diff <= tol, f"{what}: max diff {diff} > {tol}")
        else:
            self.check(abs(value - want) <= tol, f"{what}: {value} vs {want}")

    def error_shape(self, status, body, want_status, what):
        self.check(status == want_status, f"{what}: status {status}, want {want_status}: {body}")
        ok = (isinstance(body, dict) and isinstance(body.get("error"), dict)
              and isinstance(body["error"].get("message"), str)
              and isinstance(body["error"].get("type"), str)
              and body["error"].get("code") == want_status)
        self.check(ok, f"{what}: error body shape: {body}")

    def finish(self, name):
        print(f"{name}: {self.checks} checks, {self.failures} failures", flush=True)
        sys.exit(1 if self.failures else 0)


def split_pair(inp):
    """A golden cross-encoder input as (query ids, document ids): the type-0 prefix and
    the type-1 rest (models without token types: split in the middle)."""
    ids = inp["ids"]
    types = inp.get("type_ids") or []
    if any(types):
        k = types.index(1)
    else:
        k = len(ids) // 2
    return ids[:k], ids[k:]
