"""isrlab's exec driver for librdkafka, through confluent-kafka-python
(Debian python3-confluent-kafka, which links Debian's librdkafka1).

    workload: {client: librdkafka}      # isrlab runs: /usr/bin/python3 librdkafka_driver.py

Each producer process has a librdkafka producer of its own and sends one
message at a time, waiting for its delivery report; each consumer process
has a consumer assigned its partitions from their start (no group). The
hello's Kafka-named settings are librdkafka's own names; client.config is
passed to librdkafka verbatim, after them. See outcome() for what each
delivery error means, and docs/clients-under-faults.md.

With the protocol's "txn" feature (the txn workload), a transactional
producer process is a librdkafka producer with the process's
transactional.id (init_transactions when it opens, then
begin_transaction, produce and flush, commit_transaction or
abort_transaction; see Transactor and end_step() for how each error is
mapped), and consumers read with isolation.level=read_committed.

On a secured cluster (the protocol's "security" feature) every handle
connects with the hello's security settings: security.protocol,
sasl.mechanisms, sasl.username, sasl.password and ssl.ca.location, passed
to librdkafka as they come (librdkafka before 2.6.1 sends its own nonce
once more in SCRAM's client-final-message; the broker, like Kafka's,
only asks that the nonce end with the server's).

With the protocol's "queue" feature (the queue workload), a group
consumer process is a librdkafka consumer subscribed with the group's
group.id; see GroupConsumer for how it commits, crashes and reports its
assignments and commits, and commit_outcome() for what each commit error
means.
"""
import sys
import threading
import time

from isrlab_exec import Refused, log, serve

try:
    import confluent_kafka
    from confluent_kafka import KafkaError, KafkaException
except ImportError as e:  # refused in the hello, naming the package
    confluent_kafka, KafkaError, KafkaException, IMPORT_ERROR = None, None, None, e
else:
    IMPORT_ERROR = None

# Settings the driver makes itself.
DRIVER_KEYS = {"bootstrap.servers", "group.id", "enable.auto.commit", "enable.auto.offset.store",
               "auto.commit.interval.ms", "on_commit", "on_delivery", "error_cb", "stats_cb", "logger",
               "partitioner", "transactional.id"}

# The most messages a group member's poll hands over: poll(), then what
# consume(timeout=0) has already fetched, as many as the sarama driver's
# polls take (its ChannelBufferSize), so that a poll's work is comparable.
GROUP_POLL = 256

# How long a group member that leaves (crash, close) polls for its
# partitions' revocation before it closes (GroupConsumer.leave).
LEAVE_WAIT = 5.0

# How long past its own timeout a send waits for its delivery report
# (librdkafka delivers _MSG_TIMED_OUT itself at message.timeout.ms).
REPORT_GRACE = 5.0


def refusal_codes():
    """Broker answers that hold on every attempt: the message was not
    written (the franz-go driver's list, by Kafka code)."""
    return {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_REQUIRED_ACKS, KafkaError.RECORD_LIST_TOO_LARGE,
            KafkaError.INVALID_RECORD, KafkaError.INVALID_MSG, KafkaError.TOPIC_EXCEPTION,
            KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
            KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT, KafkaError.UNSUPPORTED_COMPRESSION_TYPE}


def local_codes():
    """librdkafka's own errors for a message that never left its queues."""
    return {KafkaError._QUEUE_FULL, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC,
            KafkaError._INVALID_ARG, KafkaError._PURGE_QUEUE, KafkaError._STATE}


def outcome(err, sent_once, produced):
    """The outcome of a send that ended with KafkaError err: "fail" only
    when the message cannot have been written, else "info".

    produced is False when produce() itself raised (the message never
    entered librdkafka), True for an error in a delivery report.
    sent_once: retries is 0, so a broker's answer was to the only attempt.
    """
    code = err.code()
    if not produced:
        # produce() refused it: _QUEUE_FULL, _UNKNOWN_PARTITION,
        # _UNKNOWN_TOPIC, MSG_SIZE_TOO_LARGE, _FATAL (a fatal idempotent
        # producer takes no more messages), _STATE...
        return "fail"
    if code in local_codes():
        # In a delivery report: librdkafka failed the message in its
        # partition queue (the partition or topic does not exist, purged
        # before it was sent).
        return "fail"
    if code in refusal_codes():
        return "fail"
    if sent_once and code in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.UNKNOWN_TOPIC_OR_PART):
        return "fail"
    # _MSG_TIMED_OUT (message.timeout.ms passed, maybe while the request
    # was in flight: librdkafka calls that POSSIBLY_PERSISTED, and
    # confluent-kafka-python does not expose the message's status),
    # _TIMED_OUT, _TRANSPORT, _PURGE_INFLIGHT, REQUEST_TIMED_OUT,
    # NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_FOR_PARTITION, _FATAL
    # and OUT_OF_ORDER_SEQUENCE_NUMBER of an idempotent producer, an
    # error after retries: the message may be in the log.
    return "info"


def error_text(err):
    return "%s: %s" % (err.name(), err.str())


def security_conf(hello):
    """The hello's security settings (a secured cluster's) in librdkafka's
    names, which are Kafka's but for sasl.mechanisms: every handle
    connects with them."""
    sec = dict(hello.get("security") or {})
    if "sasl.mechanism" in sec:
        sec["sasl.mechanisms"] = sec.pop("sasl.mechanism")
    return sec


class Client:
    def name(self):
        if confluent_kafka is None:
            return "confluent-kafka-python"
        return "confluent-kafka-python %s (librdkafka %s)" % (confluent_kafka.version()[0], confluent_kafka.libversion()[0])

    def check(self, hello):
        if IMPORT_ERROR is not None:
            raise Refused("confluent-kafka-python is not installed for %s (Debian package python3-confluent-kafka): %s"
                          % (sys.executable, IMPORT_ERROR))
        for k in hello.get("client.config") or {}:
            if k in DRIVER_KEYS:
                raise Refused("client.config.%s: set by the driver" % k)
        # librdkafka checks its configuration when a handle is created; with
        # no brokers to bootstrap from, it connects nowhere.
        makes = [self.producer_conf, self.consumer_conf]
        if "queue" in (hello.get("features") or []):
            makes.append(lambda h, proc: self.group_conf(h, "isrlab-check", True, 5000, None))
        if "txn" in (hello.get("features") or []):
            timeout = hello["config"].get("transaction.timeout.ms", "60000")
            makes.append(lambda h, proc: self.transactional_conf(h, proc, "isrlab-check", timeout))
        for make in makes:
            conf = make(hello, 0)
            conf["bootstrap.servers"] = ""
            conf["log_level"] = 0
            consumer = make == self.consumer_conf or "group.id" in conf
            try:
                h = confluent_kafka.Consumer(conf) if consumer else confluent_kafka.Producer(conf)
            except KafkaException as e:
                raise Refused("librdkafka refuses the configuration: %s" % e.args[0].str())
            except (ValueError, TypeError) as e:
                raise Refused("confluent-kafka-python refuses the configuration: %s" % e)
            if consumer:
                h.close()
            else:
                h.flush(0)

    def common(self, hello):
        conf = {"bootstrap.servers": ",".join(hello["bootstrap"]), "client.id": "isrlab-exec"}
        conf.update(security_conf(hello))
        return conf

    def producer_conf(self, hello, proc):
        c = hello["config"]
        conf = self.common(hello)
        conf.update({"acks": c["acks"], "enable.idempotence": c["enable.idempotence"], "retries": c["retries"],
                     "request.timeout.ms": c["request.timeout.ms"], "delivery.timeout.ms": c["delivery.timeout.ms"],
                     "linger.ms": c["linger.ms"]})
        if "max.in.flight.requests.per.connection" in c:
            conf["max.in.flight.requests.per.connection"] = c["max.in.flight.requests.per.connection"]
        conf.update(hello.get("client.config") or {})
        return conf

    def features(self):
        return ["txn", "queue", "security"]

    def group_conf(self, hello, group, auto_commit, interval_ms, on_commit):
        """A group member's configuration: librdkafka's own auto-commit
        (enable.auto.commit, every auto.commit.interval.ms, on a revoke
        and on close) of the offsets the driver stores, itself, for each
        record it hands to a poll (enable.auto.offset.store=false,
        store_offsets): what was delivered, processed or not."""
        conf = self.common(hello)
        conf.update({"group.id": group, "enable.auto.commit": auto_commit, "enable.auto.offset.store": False,
                     "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
        if auto_commit:
            conf["auto.commit.interval.ms"] = int(interval_ms)
        if on_commit is not None:
            conf["on_commit"] = on_commit
        conf.update(hello.get("client.config") or {})
        return conf

    def group_consumer(self, hello, proc, group, auto_commit, interval_ms):
        return GroupConsumer(self, hello, group, auto_commit, interval_ms)

    def transactional_conf(self, hello, proc, txn_id, txn_timeout_ms):
        """The producer configuration with the process's transactional.id
        and transaction.timeout.ms: idempotent, acks=all (librdkafka
        requires both of a transactional producer), and a
        delivery.timeout.ms (message.timeout.ms) of at most the
        transaction's timeout, which librdkafka also requires."""
        conf = self.producer_conf(hello, proc)
        conf.update({"transactional.id": txn_id, "transaction.timeout.ms": int(txn_timeout_ms),
                     "enable.idempotence": True, "acks": "all"})
        conf["delivery.timeout.ms"] = min(int(conf["delivery.timeout.ms"]), int(txn_timeout_ms))
        conf.update(hello.get("client.config") or {})
        return conf

    def consumer_conf(self, hello, proc):
        conf = self.common(hello)
        # A group id librdkafka requires; assigned partitions join no group.
        conf.update({"group.id": "isrlab-exec-%d" % proc, "enable.auto.commit": False,
                     "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
                     "fetch.wait.max.ms": 100})
        conf.update(hello.get("client.config") or {})
        return conf

    def producer(self, hello, proc):
        return Producer(self, hello, proc)

    def consumer(self, hello, proc, parts, read_committed=False):
        conf = self.consumer_conf(hello, proc)
        if read_committed:
            conf["isolation.level"] = "read_committed"
        c = confluent_kafka.Consumer(conf)
        c.assign([confluent_kafka.TopicPartition(hello["topic"], p, confluent_kafka.OFFSET_BEGINNING) for p in parts])
        return Consumer(c)

    def transactor(self, hello, proc, txn_id, txn_timeout_ms, parts, timeout):
        p = confluent_kafka.Producer(self.transactional_conf(hello, proc, txn_id, txn_timeout_ms))
        init_transactions(p, timeout)
        cons = self.consumer(hello, proc, parts, read_committed=True) if parts else None
        return Transactor(p, hello["topic"], cons)


class Producer:
    def __init__(self, client, hello, proc):
        self.conf = client.producer_conf(hello, proc)
        self.topic = hello["topic"]
        self.sent_once = str(hello["config"]["retries"]) == "0"
        self.acks0 = str(hello["config"]["acks"]) == "0"
        self.p = confluent_kafka.Producer(self.conf)

    def send(self, partition, key, value, timeout):
        if self.p is None:
            # An idempotent producer that raised a fatal error takes no
            # more messages: a new one, as an application would make.
            self.p = confluent_kafka.Producer(self.conf)
        got = threading.Event()
        report = {}

        def delivered(err, msg):
            report["err"], report["offset"] = err, msg.offset()
            got.set()

        try:
            self.p.produce(self.topic, value=value.encode(), key=key.encode(), partition=partition, on_delivery=delivered)
        except BufferError as e:
            return "fail", None, "_QUEUE_FULL: %s" % e
        except KafkaException as e:
            err = e.args[0]
            return outcome(err, self.sent_once, False), None, error_text(err)
        deadline = time.monotonic() + timeout + REPORT_GRACE
        while not got.is_set() and time.monotonic() < deadline:
            self.p.poll(0.05)
        if not got.is_set():
            return "info", None, "no delivery report within %.1fs" % (timeout + REPORT_GRACE)
        err = report["err"]
        if err is None:
            off = report["offset"]
            return "ok", (off if off is not None and off >= 0 and not self.acks0 else None), ""
        if err.fatal():
            self.close()
        return outcome(err, self.sent_once, True), None, error_text(err)

    def close(self):
        p, self.p = self.p, None
        if p is not None:
            left = p.flush(1)
            if left:
                log("producer closed with %d messages undelivered" % left)


class Consumer:
    def __init__(self, c):
        self.c = c

    def poll(self, timeout):
        records, errors = [], []

        def take(m):
            if m is None:
                return
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(error_text(m.error()))
                return
            records.append({"partition": m.partition(), "offset": m.offset(), "value": m.value().decode()})

        take(self.c.poll(timeout))
        # What else is already fetched, without waiting.
        for m in self.c.consume(num_messages=1000, timeout=0):
            take(m)
        err = errors[0] if errors else ""
        return ("info" if err and not records else "ok"), records, err

    def close(self):
        self.c.close()


def commit_outcome(err, parts):
    """A commit's outcome (type, committed, error) from librdkafka's
    answer: err the request's error (None, or the KafkaError a
    synchronous commit raised or an on_commit callback got), parts the
    partitions with their offsets and per-partition errors (asked is
    what was asked for, when librdkafka gave none back).

    ok: committed, with the offsets the coordinator accepted (a
    partition it refused is named in the error). fail: no request was
    written: _NO_OFFSET (nothing to commit: librdkafka writes no
    OffsetCommit without a valid offset, rd_kafka_OffsetCommitRequest).
    info, with every offset asked for: any other error. librdkafka
    retries an OffsetCommit after a broken connection or a timeout
    (rd_kafka_handle_OffsetCommit: RETRY for request-level errors), so
    even a coordinator's refusal (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    REBALANCE_IN_PROGRESS, NOT_COORDINATOR) may answer a retry of a
    request whose first attempt was applied; nothing in the error
    tells."""
    asked = [{"partition": p.partition, "offset": p.offset} for p in parts if p.offset >= 0]
    if err is not None:
        if err.code() == KafkaError._NO_OFFSET:
            return "fail", [], error_text(err)
        return "info", asked, error_text(err)
    ok = [{"partition": p.partition, "offset": p.offset} for p in parts if p.offset >= 0 and p.error is None]
    refused = [error_text(p.error) for p in parts if p.offset >= 0 and p.error is not None]
    if refused and not ok:
        return "info", asked, ", ".join(refused)
    return "ok", ok, ", ".join(refused)


class GroupConsumer:
    """A consumer group member: a librdkafka consumer subscribed to the
    topic with the group's group.id. Its rebalance callbacks (on_assign,
    on_revoke, on_lost) and its auto-commits' results (on_commit) run
    inside the calls of the process's operations (poll, close), which
    hand them to the lab as events in order.

    A manual commit is commit(offsets, asynchronous=False), waited for
    on a thread of its own at most the operation's timeout (librdkafka's
    own wait is unbounded while it has no coordinator): past it the
    outcome is unknown. A crash stores RD_KAFKA_OFFSET_INVALID for every
    partition (librdkafka writes no OffsetCommit for an invalid offset),
    so that leaving the group (leave(), then close), which with
    auto-commit commits the stored offsets on the revoke, commits
    nothing; the member leaves the group, as the other clients' crashed
    members do. A commit librdkafka wrote before the crash may still be
    answered; it is not reported."""

    def __init__(self, client, hello, group, auto_commit, interval_ms):
        self.topic = hello["topic"]
        self.auto_commit = auto_commit
        self.evs = []
        self.crashed = False
        self.assigned = []
        self.c = confluent_kafka.Consumer(client.group_conf(hello, group, auto_commit, interval_ms,
                                                            self.committed if auto_commit else None))
        self.c.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_revoke)

    def take_events(self):
        evs, self.evs = self.evs, []
        return evs

    def on_assign(self, consumer, parts):
        self.assigned = sorted(p.partition for p in parts if p.topic == self.topic)
        self.evs.append({"event": "assigned", "partitions": self.assigned})

    def on_revoke(self, consumer, parts):
        self.assigned = []
        self.evs.append({"event": "assigned", "partitions": []})

    def committed(self, err, parts):
        """on_commit: an auto-commit's result (manual commits are
        synchronous, reported by commit)."""
        if self.crashed or (err is not None and err.code() == KafkaError._NO_OFFSET):
            return
        typ, offs, text = commit_outcome(err, [p for p in parts if p.topic == self.topic])
        self.evs.append({"event": "committed", "type": typ, "committed": offs, "error": text})

    def poll(self, timeout):
        records, errors = [], []

        def take(m):
            if m is None:
                return
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(error_text(m.error()))
                return
            if self.auto_commit:
                # Delivered: auto-commit covers it from here on. A
                # partition revoked since it was fetched takes no store
                # (_STATE); the record was still delivered.
                try:
                    self.c.store_offsets(message=m)
                except KafkaException as e:
                    log("store_offsets:", error_text(e.args[0]))
            records.append({"partition": m.partition(), "offset": m.offset(), "value": m.value().decode()})

        take(self.c.poll(timeout))
        for m in self.c.consume(num_messages=GROUP_POLL - 1, timeout=0):
            take(m)
        err = errors[0] if errors else ""
        return ("info" if err and not records else "ok"), records, err

    def commit(self, offsets, timeout):
        parts = [confluent_kafka.TopicPartition(self.topic, o["partition"], o["offset"]) for o in offsets]
        result = {}

        def run():
            try:
                result["parts"] = self.c.commit(offsets=parts, asynchronous=False)
            except KafkaException as e:
                result["err"] = e.args[0]
            except Exception as e:  # the consumer was closed under it
                result["exc"] = e

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(timeout)
        asked = [{"partition": p.partition, "offset": p.offset} for p in parts]
        if t.is_alive():
            return "info", asked, "no answer to the commit within %.1fs" % timeout
        if "exc" in result:
            return "info", asked, "commit: %s" % result["exc"]
        if "err" in result:
            return commit_outcome(result["err"], parts)
        return commit_outcome(None, result["parts"] or parts)

    def crash(self):
        self.crashed = True
        if self.auto_commit and self.assigned:
            try:
                self.c.store_offsets(offsets=[confluent_kafka.TopicPartition(self.topic, p, confluent_kafka.OFFSET_INVALID)
                                              for p in self.assigned])
            except KafkaException as e:
                log("crash: store_offsets:", e)
        self.close()

    def close(self):
        c, self.c = self.c, None
        if c is not None:
            self.leave(c)
            c.close()

    def leave(self, c, clock=time.monotonic):
        """Leaves the group before c is closed: unsubscribes, then polls
        until the revocation has run (at most LEAVE_WAIT), so that close()
        has no partitions to revoke.

        librdkafka can hang for good in the rebalance callback of a
        closing consumer: the rd_kafka_assign() and
        rd_kafka_rebalance_protocol() that confluent-kafka-python calls
        there wait on a group that is shutting down (librdkafka issues
        4041, 4884). confluent-kafka-python 1.7 makes those calls holding
        the GIL, so the hang stops every process of the driver (stacks at
        the hang: a member in close, another in poll, nothing else
        running). Outside close the callback is the one every rebalance
        runs. Records a poll here hands over are neither reported nor
        stored: to the lab they were never delivered, and with
        auto-commit nothing commits them."""
        try:
            c.unsubscribe()
        except KafkaException as e:
            log("leave: unsubscribe:", e)
            return
        deadline = clock() + LEAVE_WAIT
        while True:
            try:
                c.poll(0.1)  # serves the revocation (on_revoke)
            except (KafkaException, RuntimeError) as e:
                log("leave: poll:", e)
                return
            if not self.assigned or clock() >= deadline:
                break
        if self.assigned:
            log("leave: partitions %s not revoked within %.0fs; closing" % (self.assigned, LEAVE_WAIT))


def init_transactions(p, timeout):
    """init_transactions, retried while librdkafka says the error is
    retriable ("the application may retry", rd_kafka_init_transactions:
    the coordinator may be loading or down) until timeout (seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            p.init_transactions(max(deadline - time.monotonic(), 0.001))
            return
        except KafkaException as e:
            err = e.args[0]
            if not err.retriable() or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def end_step(commit, err):
    """What to do when commit_transaction (commit) or abort_transaction
    raised KafkaError err, from librdkafka's documentation of
    rd_kafka_commit_transaction and rd_kafka_abort_transaction and from
    librdkafka 2.0's rdkafka_txnmgr.c:

    - "retry": err.retriable(): "If the call fails with a retriable error
      the application may retry" the same call (a timeout: the commit or
      abort goes on in the background, and librdkafka reports an EndTxn
      it gave up retrying, a timeout or a broken connection, as retriable
      too); the caller retries until its deadline, and past it the
      outcome is unknown.
    - "info": err.fatal(): the producer "must be terminated" (fenced,
      INVALID_TXN_STATE, and "Transaction commit succeeded on the broker
      but the transaction had already failed locally"): nothing says
      whether its EndTxn committed; the process ends. So for any other
      error from an abort (not confirmed), or from a commit that is
      neither abortable nor retriable.
    - "abort-fail": a commit's err.txn_requires_abort() with code
      _INCONSISTENT: "the application must abort the current transaction
      with abort_transaction()"; librdkafka raises it when messages of the
      transaction failed delivery, before it writes any EndTxn, so the
      transaction cannot have committed.
    - "abort-info": any other abortable error from a commit: librdkafka
      also makes an EndTxn answered UNKNOWN_PRODUCER_ID,
      INVALID_PRODUCER_ID_MAPPING or an error it does not handle
      abortable, and an earlier attempt of that EndTxn, whose answer was
      lost, may have committed ("the EndTxn(commit) may have succeeded",
      rd_kafka_txn_handle_EndTxn). The workload commits only when every
      record was acknowledged, so no failed delivery explains it.
    """
    if err.fatal():
        return "info"
    if err.retriable():
        return "retry"
    if commit and err.txn_requires_abort():
        return "abort-fail" if err.code() == KafkaError._INCONSISTENT else "abort-info"
    return "info"


class Transactor:
    """A transactional producer process: its librdkafka producer,
    initialized, and its read_committed consumer for read-process-write
    transactions (None without)."""

    def __init__(self, p, topic, cons):
        self.p = p
        self.topic = topic
        self.cons = cons

    def begin(self):
        try:
            self.p.begin_transaction()
        except KafkaException as e:
            return "fail", error_text(e.args[0])
        return "ok", ""

    def poll(self, timeout):
        if self.cons is None:
            return "info", [], "the producer was opened without a consumer"
        return self.cons.poll(timeout)

    def produce(self, records, timeout):
        """Produces records in the transaction and waits (flush) for their
        delivery reports until timeout: each one's offset, -1 when not
        acknowledged, and the first error. ok only when every record was
        acknowledged."""
        offsets = [-1] * len(records)
        errors = []

        def report(i):
            def delivered(err, msg):
                if err is None:
                    offsets[i] = msg.offset()
                else:
                    errors.append(error_text(err))
            return delivered

        for i, r in enumerate(records):
            key = r.get("key")
            try:
                self.p.produce(self.topic, value=r["value"].encode(), key=key.encode() if key else None,
                               partition=r["partition"], on_delivery=report(i))
            except BufferError as e:
                errors.append("_QUEUE_FULL: %s" % e)
                break
            except KafkaException as e:
                errors.append(error_text(e.args[0]))
                break
        left = self.p.flush(timeout)
        if left and not errors:
            errors.append("%d delivery reports missing after %.1fs" % (left, timeout))
        if errors or -1 in offsets:
            return "info", offsets, (errors or ["a record was not acknowledged"])[0]
        return "ok", offsets, ""

    def end(self, commit, timeout):
        """Commits or aborts; returns the outcome, the error, and whether
        the producer can run no more transactions."""
        return end_transaction(self.p, commit, timeout)

    def close(self):
        if self.cons is not None:
            self.cons.close()
        # A transaction left open is aborted by the coordinator at
        # transaction.timeout.ms.
        self.p = None


def end_transaction(p, commit, timeout, clock=time.monotonic):
    """Ends p's transaction as end_step() says: (outcome, error, done).
    ok only for a commit_transaction that returned; fail for an abort
    confirmed by abort_transaction (asked for, or after an abortable
    commit error); info when the commit's or abort's fate is unknown."""
    deadline = clock() + timeout
    what = "commit" if commit else "abort"
    call = p.commit_transaction if commit else p.abort_transaction
    while True:
        try:
            call(max(deadline - clock(), 0.001))
        except KafkaException as e:
            err = e.args[0]
            step = end_step(commit, err)
            if step == "retry" and clock() < deadline:
                continue
            if step in ("retry", "info"):
                return "info", "%s: %s" % (what, error_text(err)), True
            typ, aerr, done = end_transaction(p, False, max(deadline - clock(), 0.001), clock)
            why = "commit: %s; " % error_text(err)
            if typ != "fail":
                # The abort was not confirmed: the commit's fate is unknown
                # only if its EndTxn may have been written, but the process
                # ends either way.
                return ("info" if step == "abort-info" else "fail"), why + aerr, True
            if step == "abort-info":
                return "info", why + "aborted, but an EndTxn(commit) may have been written before", done
            return "fail", why + "aborted", done
        if commit:
            return "ok", "", False
        return "fail", "", False


if __name__ == "__main__":
    sys.exit(serve(Client()))
