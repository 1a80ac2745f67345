"""The line protocol of isrlab's exec client (docs/client-protocol.md),
shared by the Python reference drivers.

A driver module gives serve() a Client: its name, a check of the lab's
hello (a refusal, or None), and a producer and a consumer class; a Client
that runs transactions also has features() == ["txn"], a transactor and
consumers that read read_committed (docs/client-protocol.md,
"Transactions"); one that runs consumer groups has "queue" among its
features() and a group_consumer (docs/client-protocol.md, "Consumer
groups"), whose take_events() hands over what happened to the member
while an operation ran. serve()
answers the hello, runs each workload process on a thread of its own (so
that one process's blocked send does not hold another's poll), and prints
one completion per operation. Started with --check, it answers the hello
and exits: isrlab does that when a scenario loads, so that a setting the
client cannot honour is refused before any run.
"""
import faulthandler
import json
import os
import queue
import signal
import sys
import threading
import traceback

PROTOCOL = 1


class Refused(Exception):
    """The client cannot do what the hello asks."""


class Out:
    """Whole lines on stdout, one thread at a time."""

    def __init__(self, f):
        self.f = f
        self.lock = threading.Lock()

    def print(self, obj):
        line = json.dumps(obj, separators=(",", ":"))
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def done(op, typ, **kw):
    """A completion of op: typ is ok, fail or info."""
    d = {"id": op["id"], "process": op["process"], "type": typ}
    d.update({k: v for k, v in kw.items() if v is not None and v != ""})
    return d


class Process:
    """One workload process: its operations in order, on its own thread."""

    def __init__(self, client, hello, out):
        self.client = client
        self.hello = hello
        self.out = out
        self.ops = queue.Queue()
        self.handle = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while True:
            op = self.ops.get()
            if op is None:
                break
            try:
                d = self.do(op)
            except Exception as e:  # a driver bug: say so, the record's fate is unknown
                log(traceback.format_exc())
                # A record or a transaction end may have reached the brokers.
                d = done(op, "info" if op["f"] in ("send", "poll", "produce", "end", "commit") else "fail",
                         error="driver error: %s: %s" % (type(e).__name__, e))
                if op["f"] == "end":
                    d["done"] = True
            self.out.print(d)
            if op["f"] == "close":
                break
        self.close_handle()

    def do(self, op):
        f = op["f"]
        timeout = op.get("timeout_ms", 30000) / 1000.0
        if f == "open-producer":
            self.handle = self.client.producer(self.hello, op["process"])
            return done(op, "ok")
        if f == "open-consumer":
            if op.get("isolation") == "read_committed":
                self.handle = self.client.consumer(self.hello, op["process"], op.get("partitions") or [], read_committed=True)
            else:
                self.handle = self.client.consumer(self.hello, op["process"], op.get("partitions") or [])
            return done(op, "ok")
        if f == "open-group-consumer":
            self.handle = self.client.group_consumer(self.hello, op["process"], op["group"], bool(op.get("auto_commit")),
                                                     op.get("auto_commit_interval_ms") or 5000)
            return done(op, "ok", events=self.events())
        if f == "commit":
            if self.handle is None:
                return done(op, "fail", error="commit before open-group-consumer")
            typ, committed, err = self.handle.commit(op.get("offsets") or [], timeout)
            return done(op, typ, committed=committed, error=err, events=self.events())
        if f == "crash":
            h, self.handle = self.handle, None
            if h is not None:
                h.crash()
            return done(op, "ok")
        if f == "open-transactional-producer":
            self.handle = self.client.transactor(self.hello, op["process"], op["transactional_id"],
                                                 op["transaction_timeout_ms"], op.get("partitions") or [], timeout)
            return done(op, "ok")
        if f == "begin":
            if self.handle is None:
                return done(op, "fail", error="begin before open-transactional-producer")
            typ, err = self.handle.begin()
            return done(op, typ, error=err)
        if f == "produce":
            if self.handle is None:
                return done(op, "fail", offsets=[-1] * len(op["records"]), error="produce before open-transactional-producer")
            typ, offsets, err = self.handle.produce(op["records"], timeout)
            return done(op, typ, offsets=offsets, error=err)
        if f == "end":
            if self.handle is None:
                return done(op, "fail", error="end before open-transactional-producer")
            typ, err, over = self.handle.end(op["commit"], timeout)
            return done(op, typ, error=err, done=over or None)
        if f == "send":
            if self.handle is None:
                return done(op, "fail", error="send before open-producer")
            typ, offset, err = self.handle.send(op["partition"], op.get("key", ""), op["value"], timeout)
            return done(op, typ, offset=offset if typ == "ok" else None, error=err)
        if f == "poll":
            if self.handle is None:
                return done(op, "info", error="poll before open-consumer")
            typ, records, err = self.handle.poll(timeout)
            return done(op, typ, records=records or None, error=err, events=self.events())
        if f == "close":
            h = self.handle
            self.close_handle()
            return done(op, "ok", events=self.events(h))
        return done(op, "fail", error="unknown operation " + f)

    def events(self, h=None):
        """A group member's events since the last operation, or None."""
        h = h or self.handle
        take = getattr(h, "take_events", None)
        return (take() or None) if take else None

    def close_handle(self):
        h, self.handle = self.handle, None
        if h is not None:
            try:
                h.close()
            except Exception as e:
                log("close:", e)


def serve(client, argv=None, stdin=None, stdout=None):
    """Runs the protocol on stdin and stdout until stdin ends."""
    argv = sys.argv[1:] if argv is None else argv
    stdin = stdin or sys.stdin
    out = Out(stdout or sys.stdout)
    line = stdin.readline()
    if not line:
        return 0
    try:
        hello = json.loads(line)
    except ValueError:
        log("the first line is not a hello: %r" % line)
        return 2
    if hello.get("type") != "hello":
        log("the first line is not a hello: %r" % line)
        return 2
    if hello.get("protocol") != PROTOCOL:
        out.print({"type": "refused", "error": "protocol %s: this driver speaks %d" % (hello.get("protocol"), PROTOCOL)})
        return 0
    features = list(getattr(client, "features", lambda: [])())
    try:
        name = client.name()
        for f in hello.get("features") or []:
            if f not in features:
                raise Refused("this driver does not run the protocol's %r feature" % f)
        client.check(hello)
    except Refused as e:
        out.print({"type": "refused", "error": str(e)})
        return 0
    # A lab that takes the driver for hung sends SIGQUIT before it kills
    # it: every thread's stack goes to stderr, which the run keeps.
    faulthandler.register(signal.SIGQUIT, all_threads=True)
    out.print({"type": "hello", "client": name, "pid": os.getpid(), "features": features})
    if "--check" in argv:
        return 0
    procs = {}
    for line in stdin:
        try:
            op = json.loads(line)
        except ValueError:
            log("not an operation: %r" % line)
            return 2
        p = procs.get(op["process"])
        if p is None:
            p = procs[op["process"]] = Process(client, hello, out)
        p.ops.put(op)
        if op["f"] == "close":
            del procs[op["process"]]
    # The lab closed stdin: the run is over.
    for p in procs.values():
        p.ops.put(None)
    for p in procs.values():
        p.thread.join(10)
    return 0


def config_value(default, value, key):
    """value (a string from client.config) as the type of the client's
    default for key."""
    if isinstance(default, bool):
        if value.lower() not in ("true", "false"):
            raise Refused("client.config.%s: %r is not true or false" % (key, value))
        return value.lower() == "true"
    if isinstance(default, int):
        try:
            return int(value)
        except ValueError:
            raise Refused("client.config.%s: %r is not an integer" % (key, value))
    if isinstance(default, float):
        try:
            return float(value)
        except ValueError:
            raise Refused("client.config.%s: %r is not a number" % (key, value))
    if isinstance(default, tuple) or key == "api_version":
        try:
            return tuple(int(x) for x in value.split("."))
        except ValueError:
            raise Refused("client.config.%s: %r is not a version like 2.5.0" % (key, value))
    return value
