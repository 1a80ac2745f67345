"""isrlab's exec driver for kafka-python (Debian python3-kafka).

    workload: {client: kafka-python}    # isrlab runs: /usr/bin/python3 kafkapython_driver.py

Each producer process has a KafkaProducer of its own and sends one record
at a time, waiting for its future; each consumer process has a
KafkaConsumer assigned its partitions from their start (no group).
kafka-python has no idempotent producer and no transactions: a hello with
enable.idempotence true is refused. The hello's Kafka-named settings map
to kafka-python's keyword names; client.config takes kafka-python's names
(linger_ms, api_version, ...), applied after them. See outcome() for what
each error means, and docs/clients-under-faults.md. On a secured cluster
(the protocol's "security" feature) every client connects with the
hello's security settings, in kafka-python's names (security_conf()).

With the protocol's "queue" feature (the queue workload), a group
consumer process is a KafkaConsumer subscribed with the group's group_id;
see GroupConsumer for how it commits, crashes and reports its assignments
and commits, and commit_outcome() for what each commit error means.
"""
import queue
import sys
import threading

from isrlab_exec import Refused, config_value, serve

try:
    import kafka
    from kafka import errors as Errors
except ImportError as e:  # refused in the hello, naming the package
    kafka, Errors, IMPORT_ERROR = None, None, e
else:
    IMPORT_ERROR = None

# Settings the driver makes itself.
DRIVER_KEYS = {"bootstrap_servers", "group_id", "key_serializer", "value_serializer", "key_deserializer",
               "value_deserializer", "partitioner", "enable_auto_commit", "auto_commit_interval_ms",
               "default_offset_commit_callback"}

# kafka-python 2.0.2 probes the broker's version at every new client unless
# api_version is given, and a probe that fails under a fault makes the
# constructor raise; the driver names one (client.config can override it).
API_VERSION = (2, 5, 0)

# The most records a group member's poll hands over, as many as the
# librdkafka and sarama drivers' polls take, so that a poll's work is
# comparable.
GROUP_POLL = 256

# How long past its own timeout an operation of a group member waits for
# kafka-python's call (the lab takes a driver for hung 10 s past it).
OP_GRACE = 5.0


def refusals():
    """Broker answers that hold on every attempt (the franz-go driver's
    list, by Kafka code)."""
    return (Errors.MessageSizeTooLargeError, Errors.InvalidRequiredAcksError, Errors.RecordListTooLargeError,
            Errors.CorruptRecordException, Errors.InvalidTopicError, Errors.TopicAuthorizationFailedError,
            Errors.ClusterAuthorizationFailedError, Errors.UnsupportedForMessageFormatError)


def outcome(err, sent_once, appended):
    """The outcome of a send that ended with err: "fail" only when the
    record cannot have been written, else "info".

    appended is False when send() itself raised (the record never entered
    the accumulator). sent_once: retries is 0, so an error is the only
    attempt's.
    """
    if not appended:
        # send() raised: no metadata within max_block_ms (KafkaTimeoutError
        # "Failed to update metadata"), MessageSizeTooLargeError, an
        # unknown partition (AssertionError), a closed producer.
        return "fail"
    if isinstance(err, Errors.KafkaTimeoutError) and "expired" in str(err) and "since last attempt" not in str(err):
        # RecordAccumulator.abort_expired_batches expired the batch in the
        # accumulator before it was ever drained into a request (a batch
        # that was sent and is waiting to be retried expires "since last
        # attempt plus backoff time", and may be in the log).
        return "fail"
    if isinstance(err, refusals()):
        return "fail"
    if sent_once and isinstance(err, (Errors.NotEnoughReplicasError, Errors.UnknownTopicOrPartitionError,
                                      Errors.NodeNotReadyError, Errors.TooManyInFlightRequests)):
        # The only attempt was refused, or not written at all (the sender
        # found the connection not ready or full: KafkaClient.send fails
        # the future before writing).
        return "fail"
    # KafkaConnectionError (the connection closed with the request in
    # flight), RequestTimedOutError (the client's own request timeout
    # closes the connection), NotEnoughReplicasAfterAppendError,
    # NotLeaderForPartitionError, an error after retries, our own wait
    # on the future running out: the record may be in the log.
    return "info"


def error_text(err):
    return "%s: %s" % (type(err).__name__, err)


def own_config(hello, defaults):
    """The client.config keys that defaults (a kafka-python class's
    DEFAULT_CONFIG) has, typed as its defaults are."""
    out = {}
    for k, v in (hello.get("client.config") or {}).items():
        if k in defaults:
            out[k] = config_value(defaults[k], v, k)
    return out


# The hello's security settings in kafka-python's keyword names.
SECURITY_KEYS = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
                 "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
                 "ssl.ca.location": "ssl_cafile", "ssl.certificate.location": "ssl_certfile",
                 "ssl.key.location": "ssl_keyfile"}


def security_conf(hello):
    """The hello's security settings (a secured cluster's) as
    KafkaProducer's and KafkaConsumer's keywords: kafka-python 2.0 takes
    SCRAM-SHA-256 and SCRAM-SHA-512 (its sasl_plain_* are every
    mechanism's user and password) and checks the broker's host name
    unless ssl.endpoint.identification.algorithm is none."""
    sec = hello.get("security") or {}
    conf = {}
    for k, v in sec.items():
        if k in SECURITY_KEYS:
            conf[SECURITY_KEYS[k]] = v
        elif k == "ssl.endpoint.identification.algorithm":
            conf["ssl_check_hostname"] = v != "none"
        else:
            raise Refused("security.%s: kafka-python has no such setting" % k)
    mech = conf.get("sasl_mechanism")
    if mech is not None and kafka is not None and mech not in kafka.conn.BrokerConnection.SASL_MECHANISMS:
        raise Refused("sasl.mechanism %s: kafka-python %s takes %s" % (mech, kafka.__version__,
                                                                     ", ".join(kafka.conn.BrokerConnection.SASL_MECHANISMS)))
    return conf


class Client:
    def name(self):
        if kafka is None:
            return "kafka-python"
        return "kafka-python %s" % kafka.__version__

    def check(self, hello):
        if IMPORT_ERROR is not None:
            raise Refused("kafka-python is not installed for %s (Debian package python3-kafka): %s"
                          % (sys.executable, IMPORT_ERROR))
        if hello["config"].get("enable.idempotence") == "true":
            raise Refused("kafka-python has no idempotent producer (enable.idempotence)")
        p, c = kafka.KafkaProducer.DEFAULT_CONFIG, kafka.KafkaConsumer.DEFAULT_CONFIG
        for k in hello.get("client.config") or {}:
            if k in DRIVER_KEYS:
                raise Refused("client.config.%s: set by the driver" % k)
            if k not in p and k not in c:
                raise Refused("client.config.%s: neither KafkaProducer nor KafkaConsumer has %s "
                              "(kafka-python's names: linger_ms, api_version, ...)" % (k, k))
        own_config(hello, p)
        own_config(hello, c)
        security_conf(hello)

    def features(self):
        return ["queue", "security"]

    def producer(self, hello, proc):
        c = hello["config"]
        acks = {"all": "all", "-1": "all", "1": 1, "0": 0}[c["acks"]]
        timeout = int(c["delivery.timeout.ms"])
        conf = {"bootstrap_servers": hello["bootstrap"], "client_id": "isrlab-exec-%d" % proc, "acks": acks,
                "retries": int(c["retries"]), "request_timeout_ms": int(c["request.timeout.ms"]),
                "linger_ms": int(c["linger.ms"]), "max_block_ms": timeout, "api_version": API_VERSION}
        conf.update(security_conf(hello))
        if "max.in.flight.requests.per.connection" in c:
            conf["max_in_flight_requests_per_connection"] = int(c["max.in.flight.requests.per.connection"])
        conf.update(own_config(hello, kafka.KafkaProducer.DEFAULT_CONFIG))
        return Producer(kafka.KafkaProducer(**conf), hello["topic"], int(c["retries"]) == 0, acks == 0)

    def consumer(self, hello, proc, parts):
        conf = {"bootstrap_servers": hello["bootstrap"], "client_id": "isrlab-exec-%d" % proc, "group_id": None,
                "enable_auto_commit": False, "auto_offset_reset": "earliest", "fetch_max_wait_ms": 100,
                "api_version": API_VERSION}
        conf.update(security_conf(hello))
        conf.update(own_config(hello, kafka.KafkaConsumer.DEFAULT_CONFIG))
        c = kafka.KafkaConsumer(**conf)
        tps = [kafka.TopicPartition(hello["topic"], p) for p in parts]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        return Consumer(c)

    def group_conf(self, hello, proc, group, auto_commit, interval_ms):
        """A group member's configuration: kafka-python's own auto-commit
        (enable_auto_commit, every auto_commit_interval_ms inside poll,
        before a rebalance and on close) of its consumed positions, which
        poll advances past each record it returns: what was delivered,
        processed or not."""
        conf = {"bootstrap_servers": hello["bootstrap"], "client_id": "isrlab-exec-%d" % proc, "group_id": group,
                "enable_auto_commit": auto_commit, "auto_offset_reset": "earliest", "fetch_max_wait_ms": 100,
                "api_version": API_VERSION}
        if auto_commit:
            conf["auto_commit_interval_ms"] = int(interval_ms)
        conf.update(security_conf(hello))
        conf.update(own_config(hello, kafka.KafkaConsumer.DEFAULT_CONFIG))
        return conf

    def group_consumer(self, hello, proc, group, auto_commit, interval_ms):
        return GroupConsumer(kafka.KafkaConsumer(**self.group_conf(hello, proc, group, auto_commit, interval_ms)),
                             hello["topic"], auto_commit)


class Producer:
    def __init__(self, p, topic, sent_once, acks0):
        self.p, self.topic, self.sent_once, self.acks0 = p, topic, sent_once, acks0

    def send(self, partition, key, value, timeout):
        try:
            fut = self.p.send(self.topic, value=value.encode(), key=key.encode(), partition=partition)
        except (Errors.KafkaError, AssertionError) as e:
            return outcome(e, self.sent_once, False), None, error_text(e)
        try:
            md = fut.get(timeout=timeout)
        except Errors.KafkaError as e:
            return outcome(e, self.sent_once, True), None, error_text(e)
        off = md.offset
        return "ok", (off if off is not None and off >= 0 and not self.acks0 else None), ""

    def close(self):
        self.p.close(timeout=1)


class Consumer:
    def __init__(self, c):
        self.c = c

    def poll(self, timeout):
        try:
            got = self.c.poll(timeout_ms=int(timeout * 1000), max_records=1000)
        except Errors.KafkaError as e:
            return "info", [], error_text(e)
        records = [{"partition": r.partition, "offset": r.offset, "value": r.value.decode()}
                   for recs in got.values() for r in recs]
        return "ok", records, ""

    def close(self):
        self.c.close(autocommit=False)


def unsent(fut):
    """Whether an OffsetCommit attempt's future (from the coordinator's
    _send_offset_commit_request) failed before anything was written:
    kafka-python 2.0's ConsumerCoordinator fails it at once with no
    coordinator known (GroupCoordinatorNotAvailableError) or no generation
    (CommitFailedError), KafkaClient.send with the connection not ready
    (NodeNotReadyError), BrokerConnection.send disconnected or full
    (KafkaConnectionError, TooManyInFlightRequests); a request it takes
    is only queued (blocking=False), written by a later poll. A request
    that was queued fails later, never at once."""
    return fut.is_done and fut.failed()


def commit_outcome(err, offsets, written):
    """A commit's outcome (type, committed, error): err the exception it
    ended with (None: it returned), offsets what it asked for, written
    whether any of its OffsetCommit attempts may have reached the
    coordinator (see unsent()).

    ok: committed (kafka-python fails the commit on any partition's error
    code, _handle_offset_commit_response). fail: no attempt was written:
    the coordinator lookup failed (ensure_coordinator_ready raises a
    non-retriable error; a failed lookup in commit_offsets_async), or each
    attempt failed before it was sent. info, with every offset asked
    for: any error after an attempt was written. commit_offsets_sync
    retries an attempt that failed retriably (RequestTimedOutError,
    KafkaConnectionError with the request in flight, or a coordinator's
    GroupCoordinatorNotAvailableError or NotCoordinatorForGroupError,
    which Kafka's coordinator also answers when the append to the offsets
    topic failed after it was written) until one succeeds or fails for
    good, so even a CommitFailedError (ILLEGAL_GENERATION,
    UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS) may follow an attempt that
    was applied; an error on a single partition (OffsetMetadataTooLarge,
    TopicAuthorizationFailed) leaves the others' fate to the response,
    which kafka-python does not return."""
    asked = [{"partition": tp.partition, "offset": o.offset} for tp, o in sorted(offsets.items())]
    if err is None:
        return "ok", asked, ""
    if not written:
        return "fail", [], error_text(err)
    return "info", asked, error_text(err)


class Listener(kafka.ConsumerRebalanceListener if kafka is not None else object):
    """The member's ConsumerRebalanceListener: kafka-python calls it inside
    poll (ensure_active_group), revoking every partition before a rejoin
    and assigning the new set after it."""

    def __init__(self, member):
        self.member = member

    def on_partitions_revoked(self, revoked):
        self.member.assign([])

    def on_partitions_assigned(self, assigned):
        self.member.assign(sorted(tp.partition for tp in assigned if tp.topic == self.member.topic))


class Job:
    """A call on a member's consumer thread: fn's exception, once done."""

    def __init__(self, fn):
        self.fn, self.err = fn, None
        self.done = threading.Event()

    def run(self):
        try:
            self.fn()
        except Exception as e:  # KafkaError, or the consumer closed under it
            self.err = e
        finally:
            self.done.set()


class GroupConsumer:
    """A consumer group member: a KafkaConsumer subscribed to the topic
    with the group's group_id, whose rebalance listener (Listener) and
    auto-commits' results run inside its calls (poll, commit, close),
    which hand them to the lab as events in order.

    kafka-python auto-commits in two ways (ConsumerCoordinator): every
    auto_commit_interval_ms inside poll, asynchronously, its result
    handed to _commit_offsets_async_on_complete; and synchronously,
    commit_offsets_sync, before a rebalance and on close. The member wraps
    both on its coordinator to report each commit with offsets (an empty
    one writes nothing), and wraps _send_offset_commit_request to tell
    whether any attempt of a commit may have been written (unsent()).

    kafka-python 2.0's waits have no bound while it finds no coordinator
    (ensure_coordinator_ready, inside poll, commit_offsets_sync and the
    close's commit), and the consumer is not thread-safe: every call runs
    on the member's own thread, one at a time, and an operation waits for
    its call at most its timeout plus OP_GRACE (below the lab's hang
    grace). Past it: a poll is info with no records, and the records the
    call returns later are the next poll's; a manual commit is info (it
    is still trying); an operation that finds the thread still busy
    starts nothing (a commit is then fail: nothing was written).

    A manual commit is commit(offsets). A crash is close(autocommit=False):
    nothing is committed (ConsumerCoordinator.close commits only with
    autocommit) and the member leaves the group, as the other clients'
    crashed members do. A commit written before the crash may still be
    answered; it is not reported."""

    def __init__(self, c, topic, auto_commit):
        self.c, self.topic, self.auto_commit = c, topic, auto_commit
        self.lock = threading.Lock()
        self.evs = []
        self.stash = []  # records a late poll returned, for the next poll
        self.crashed = False
        self.assigned = []
        self.busy = None  # the Job running or queued
        self.jobs = queue.Queue()
        self.manual = None  # the offsets of the manual commit running
        self.written = {}  # id(offsets) -> (offsets, whether an attempt may have been written)
        coord = c._coordinator
        send, on_async, commit_sync = (coord._send_offset_commit_request, coord._commit_offsets_async_on_complete,
                                       coord.commit_offsets_sync)

        def send_commit(offsets):
            fut = send(offsets)
            _, before = self.written.get(id(offsets), (offsets, False))
            self.written[id(offsets)] = (offsets, before or not unsent(fut))
            return fut

        def async_done(offsets, exc):
            self.committed(offsets, exc)
            on_async(offsets, exc)

        def sync_commit(offsets):
            try:
                r = commit_sync(offsets)
            except Exception as e:
                if offsets is not self.manual:
                    self.committed(offsets, e)
                raise
            if offsets is not self.manual:
                self.committed(offsets, None)
            return r

        # ConsumerCoordinator looks each of them up on itself when it calls it.
        coord._send_offset_commit_request = send_commit
        coord._commit_offsets_async_on_complete = async_done
        coord.commit_offsets_sync = sync_commit
        c.subscribe(topics=[topic], listener=Listener(self))
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            job = self.jobs.get()
            if job is None:
                return
            job.run()

    def call(self, fn, wait):
        """Runs fn on the consumer's thread and waits at most wait seconds:
        the Job, or None when the thread was still busy with an earlier
        call (fn was not started)."""
        if self.busy is not None and not self.busy.done.wait(wait):
            return None
        job = self.busy = Job(fn)
        self.jobs.put(job)
        job.done.wait(wait)
        return job

    def take_events(self):
        with self.lock:
            evs, self.evs = self.evs, []
        return evs

    def event(self, ev):
        with self.lock:
            self.evs.append(ev)

    def assign(self, parts):
        self.assigned = parts
        self.event({"event": "assigned", "partitions": parts})

    def was_written(self, offsets):
        return self.written.pop(id(offsets), (offsets, False))[1]

    def committed(self, offsets, exc):
        """An auto-commit's result (manual commits are reported by
        commit)."""
        written = self.was_written(offsets)
        offsets = {tp: o for tp, o in offsets.items() if tp.topic == self.topic}
        if self.crashed or not offsets:
            return
        typ, offs, text = commit_outcome(exc, offsets, written)
        self.event({"event": "committed", "type": typ, "committed": offs, "error": text})

    def fetch(self, timeout):
        got = self.c.poll(timeout_ms=int(timeout * 1000), max_records=GROUP_POLL)
        records = [{"partition": r.partition, "offset": r.offset, "value": r.value.decode()}
                   for tp, recs in got.items() if tp.topic == self.topic for r in recs]
        with self.lock:
            self.stash.extend(records)

    def poll(self, timeout):
        with self.lock:
            records, self.stash = self.stash, []
        if records:
            return "ok", records, ""
        job = self.call(lambda: self.fetch(timeout), timeout + OP_GRACE)
        with self.lock:
            records, self.stash = self.stash, []
        if records:
            return "ok", records, ""
        if job is None or not job.done.is_set():
            return "info", [], "kafka-python's consumer is still in a call after %.1fs" % (timeout + OP_GRACE)
        if job.err is not None:
            return "info", [], error_text(job.err)
        return "ok", [], ""

    def commit(self, offsets, timeout):
        offs = {kafka.TopicPartition(self.topic, o["partition"]): kafka.OffsetAndMetadata(o["offset"], "")
                for o in offsets}
        asked = [{"partition": o["partition"], "offset": o["offset"]} for o in offsets]
        if not offs:
            return "fail", [], "nothing to commit"
        result = {}

        def run():
            self.manual = offs
            try:
                self.c.commit(offs)
            finally:
                self.manual = None
                result["written"] = self.was_written(offs)

        job = self.call(run, timeout)
        if job is None:
            return "fail", [], "kafka-python's consumer is still in an earlier call after %.1fs: no commit started" % timeout
        if not job.done.is_set():
            return "info", asked, "no answer to the commit within %.1fs" % timeout
        return commit_outcome(job.err, offs, result["written"])

    def end(self, autocommit):
        """Closes the consumer on its thread (after any call still
        running), waiting at most OP_GRACE, and ends the thread."""
        c, self.c = self.c, None
        if c is None:
            return
        job = Job(lambda: c.close(autocommit=autocommit))
        self.busy = job
        self.jobs.put(job)
        self.jobs.put(None)
        job.done.wait(OP_GRACE)
        if job.err is not None:
            raise job.err

    def crash(self):
        self.crashed = True
        self.end(False)

    def close(self):
        try:
            self.end(True)
        finally:
            if self.assigned:
                self.assign([])


if __name__ == "__main__":
    sys.exit(serve(Client()))
