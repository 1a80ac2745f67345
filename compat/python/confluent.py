"""confluent-kafka-python (librdkafka) doing one compatibility job.

Run by compat/script_test.go: the job is JSON on stdin, the result JSON on
stdout.
"""
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from jobio import Deadline, headers_in, log, read_job, record, run, split_done, until_known

job = read_job()
bootstrap = ",".join(job["bootstrap"])
topic = job["topic"]


def conf(**more):
    """The client config: the bootstrap servers and the job's TLS, if any,
    in librdkafka's names, then more."""
    c = {"bootstrap.servers": bootstrap}
    tls = job.get("tls")
    if tls:
        c.update({"security.protocol": "SSL", "ssl.ca.location": tls["ca"]})
        if tls.get("cert"):
            c.update({"ssl.certificate.location": tls["cert"], "ssl.key.location": tls["key"]})
    c.update(more)
    return c


fast_group = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000}


def produce(records, idempotent):
    # The client's errors: every broker down (a refused TLS handshake,
    # say), a failed authentication or a fatal error ends the produce with
    # the errors seen, as kcat ends, instead of at the flush's end.
    seen, ended = [], []

    def on_error(err):
        log("error:", err)
        seen.append(err)
        if err.fatal() or err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._SSL, KafkaError._AUTHENTICATION):
            ended.append(err)

    p = Producer(conf(**{"acks": "all", "enable.idempotence": idempotent, "linger.ms": 5, "error_cb": on_error}))
    acks = [None] * len(records)
    errors = []

    def delivered(i):
        def cb(err, msg):
            if err is not None:
                errors.append(err)
            else:
                acks[i] = {"partition": msg.partition(), "offset": msg.offset()}
        return cb

    for i, r in enumerate(records):
        p.produce(topic, key=r["key"].encode(), value=r["value"].encode(), partition=r["partition"],
                  headers=headers_in(r), on_delivery=delivered(i))
        p.poll(0)
    d = Deadline(60, "produce")
    while len(p) and not ended and d.check(len(p)):
        p.flush(0.1)
    if ended:
        raise KafkaException("produce: %d undelivered, the client gave up: %s" % (len(p), "; ".join(map(str, seen))))
    left = len(p)
    if left or errors:
        raise KafkaException("produce: %d undelivered, errors %s" % (left, errors))
    return acks


def from_msg(m):
    return record(m.partition(), m.offset(), m.key(), m.value(), m.headers())


def consume():
    c = Consumer(conf(**fast_group, **{"group.id": topic + "-unused"}))
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(job["partitions"])])
    out = []
    d = Deadline(60, "consume")
    while len(out) < len(job["records"]) and d.check(len(out)):
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        out.append(from_msg(m))
    c.close()
    return out


class Member:
    def __init__(self, name):
        self.name = name
        self.assigned = set()
        self.records = []
        self.c = Consumer(conf(**fast_group, **{"group.id": job["group"], "client.id": name}))
        self.c.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke)

    def on_assign(self, c, parts):
        log(self.name, "assigned", [p.partition for p in parts])
        self.assigned |= {p.partition for p in parts}

    def on_revoke(self, c, parts):
        log(self.name, "revoked", [p.partition for p in parts])
        self.assigned -= {p.partition for p in parts}

    def poll(self):
        m = self.c.poll(0.1)
        if m is None:
            return
        if m.error():
            raise KafkaException(m.error())
        self.records.append(from_msg(m))
        self.c.commit(message=m, asynchronous=False)


def groups():
    a = Member("a")
    d = Deadline(60, "member a reads the topic")
    while len(a.records) < len(job["records"]) and d.check(len(a.records)):
        a.poll()
    first = list(a.records)
    b = Member("b")
    d = Deadline(60, "the partitions split")
    while not split_done(a.assigned, b.assigned, job["partitions"]) and d.check((a.assigned, b.assigned)):
        a.poll()
        b.poll()
    assign_a, assign_b = sorted(a.assigned), sorted(b.assigned)
    produce(job["after"], True)
    total = len(job["records"]) + len(job["after"])
    d = Deadline(60, "a and b read what was produced after the split")
    while len(a.records) + len(b.records) < total and d.check(len(a.records) + len(b.records)):
        a.poll()
        b.poll()
    a.c.close()
    b.c.close()
    return {"first": first, "assign_a": assign_a, "assign_b": assign_b,
            "a": a.records[len(first):], "b": b.records}


def offsets():
    cfg = conf(**fast_group, **{"group.id": job["group"]})
    c = Consumer(cfg)
    c.commit(offsets=[TopicPartition(topic, int(p), o) for p, o in job["commit"].items()], asynchronous=False)
    c.close()
    fresh = Consumer(cfg)
    got = fresh.committed([TopicPartition(topic, p) for p in range(job["partitions"])], timeout=30)
    fresh.close()
    return {"committed": {str(tp.partition): tp.offset for tp in got}}


def wait(futures, what):
    for k, f in futures.items():
        try:
            f.result(timeout=60)
        except Exception as e:
            raise KafkaException("%s %s: %s" % (what, k, e))


def admin():
    adm = AdminClient(conf())
    new = job["create_topic"]
    wait(adm.create_topics([NewTopic(new, num_partitions=job["partitions"], replication_factor=3,
                                     config=job["configs"])], operation_timeout=30), "create topic")
    def describe():
        configs = {}
        for _, f in adm.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, new)]).items():
            for name, entry in f.result(timeout=60).items():
                configs[name] = entry.value
        return configs

    configs = until_known(describe, lambda e: isinstance(e, KafkaException) and
                          e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART)
    wait(adm.create_partitions([NewPartitions(new, job["grow_to"])], operation_timeout=30), "create partitions")
    # Other brokers learn of the new partitions shortly after the answer.
    d = Deadline(30, "metadata shows %d partitions" % job["grow_to"])
    while d.check():
        partitions = len(adm.list_topics(new, timeout=30).topics[new].partitions)
        if partitions == job["grow_to"]:
            break
        time.sleep(0.1)
    groups = [g.id for g in adm.list_groups(timeout=30)]
    described = adm.list_groups(job["group"], timeout=30)[0]
    c = Consumer(conf(**{"group.id": topic + "-watermarks"}))
    earliest, latest = {}, {}
    for p in range(job["partitions"]):
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        earliest[str(p)], latest[str(p)] = lo, hi
    c.close()
    wait(adm.delete_topics([job["delete_topic"]], operation_timeout=30), "delete topic")
    return {"configs": configs, "partitions": partitions, "groups": groups, "group_state": described.state,
            "group_protocol_type": described.protocol_type, "members": len(described.members),
            "earliest": earliest, "latest": latest}


run(job, {
    "produce": lambda: {"acks": produce(job["records"], True), "idempotent": True},
    "consume": lambda: {"records": consume()},
    "groups": groups,
    "offsets": offsets,
    "admin": admin,
})
