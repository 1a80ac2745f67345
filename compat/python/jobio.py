"""Job input and result output for isrlab's client compatibility scripts.

A script reads one job (JSON) on stdin and prints one result (JSON) on
stdout; compat/compat_test.go defines both. Diagnostics go to stderr.
"""
import json
import sys
import time


def read_job():
    return json.load(sys.stdin)


def emit(result):
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()


def run(job, handlers):
    """Prints the result of the job's capability's handler."""
    handler = handlers.get(job["capability"])
    if handler is None:
        sys.exit("unknown capability " + job["capability"])
    emit(handler())


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def text(b):
    return None if b is None else (b.decode() if isinstance(b, bytes) else b)


def headers_out(hs):
    return [{"key": k, "value": text(v)} for k, v in (hs or [])]


def headers_in(rec):
    return [(h["key"], h["value"].encode()) for h in rec.get("headers") or []]


def record(partition, offset, key, value, headers):
    return {"partition": partition, "offset": offset, "key": text(key), "value": text(value),
            "headers": headers_out(headers)}


class Deadline:
    """A deadline for a wait loop: the job fails rather than hang."""

    def __init__(self, seconds, what):
        self.end = time.monotonic() + seconds
        self.what = what

    def check(self, state=""):
        if time.monotonic() > self.end:
            raise TimeoutError("%s: not within the deadline %s" % (self.what, state))
        return True


def until_known(call, unknown, seconds=30):
    """Retries call while it fails because the answering broker does not
    know a topic created a moment ago: brokers other than the one that
    answered the creation learn of it from the controller shortly after,
    in Kafka as in isrlab."""
    end = time.monotonic() + seconds
    while True:
        try:
            return call()
        except Exception as e:
            if not unknown(e) or time.monotonic() > end:
                raise
        time.sleep(0.1)


def split_done(a, b, partitions):
    """Both members own partitions, and together exactly all of them."""
    return bool(a) and bool(b) and not (a & b) and (a | b) == set(range(partitions))
