"""kafka-python doing one compatibility job.

Run by compat/script_test.go: the job is JSON on stdin, the result JSON on
stdout. kafka-python has no idempotent producer.
"""
import threading
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import UnknownTopicOrPartitionError
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata

from jobio import Deadline, headers_in, log, read_job, record, run, split_done, until_known

job = read_job()
topic = job["topic"]


def client_opts():
    """The bootstrap servers and the job's TLS, if any, in kafka-python's
    names."""
    o = dict(bootstrap_servers=job["bootstrap"])
    tls = job.get("tls")
    if tls:
        o.update(security_protocol="SSL", ssl_cafile=tls["ca"])
        if tls.get("cert"):
            o.update(ssl_certfile=tls["cert"], ssl_keyfile=tls["key"])
    return o


common = client_opts()
group_opts = dict(enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
                  heartbeat_interval_ms=500, metadata_max_age_ms=1000)


def produce(records):
    p = KafkaProducer(**common, acks="all", linger_ms=5)
    futures = [p.send(topic, key=r["key"].encode(), value=r["value"].encode(), partition=r["partition"],
                      headers=headers_in(r)) for r in records]
    p.flush(60)
    acks = []
    for f in futures:
        md = f.get(timeout=60)
        acks.append({"partition": md.partition, "offset": md.offset})
    p.close()
    return acks


def from_msg(m):
    return record(m.partition, m.offset, m.key, m.value, m.headers)


def consume():
    c = KafkaConsumer(**common, **group_opts)
    tps = [TopicPartition(topic, p) for p in range(job["partitions"])]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    out = []
    d = Deadline(60, "consume")
    while len(out) < len(job["records"]) and d.check(len(out)):
        for recs in c.poll(timeout_ms=500).values():
            out.extend(from_msg(m) for m in recs)
    c.close()
    return out


class Member(ConsumerRebalanceListener):
    """A group member polling on its own thread: kafka-python's poll
    blocks while the member (re)joins, so two members polled from one
    thread would wait for each other."""

    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()
        self.assigned = set()
        self.records = []
        self.error = None
        self.stop = threading.Event()
        self.c = KafkaConsumer(**common, group_id=job["group"], client_id=name, **group_opts)
        self.c.subscribe([topic], listener=self)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def on_partitions_assigned(self, parts):
        log(self.name, "assigned", [p.partition for p in parts])
        with self.lock:
            self.assigned |= {p.partition for p in parts}

    def on_partitions_revoked(self, parts):
        log(self.name, "revoked", [p.partition for p in parts])
        with self.lock:
            self.assigned -= {p.partition for p in parts}

    def run(self):
        try:
            while not self.stop.is_set():
                batch = self.c.poll(timeout_ms=100)
                recs = [from_msg(m) for ms in batch.values() for m in ms]
                if batch:
                    self.c.commit()
                with self.lock:
                    self.records.extend(recs)
            self.c.close()
        except Exception as e:
            self.error = e

    def state(self):
        if self.error:
            raise self.error
        with self.lock:
            return set(self.assigned), list(self.records)

    def close(self):
        self.stop.set()
        self.thread.join(30)
        if self.error:
            raise self.error


def wait_for(what, cond):
    d = Deadline(60, what)
    while not cond() and d.check():
        time.sleep(0.05)


def groups():
    a = Member("a")
    wait_for("member a reads the topic", lambda: len(a.state()[1]) >= len(job["records"]))
    first = a.state()[1]
    b = Member("b")
    wait_for("the partitions split", lambda: split_done(a.state()[0], b.state()[0], job["partitions"]))
    assign_a, assign_b = sorted(a.state()[0]), sorted(b.state()[0])
    produce(job["after"])
    total = len(job["records"]) + len(job["after"])
    wait_for("a and b read what was produced after the split",
             lambda: len(a.state()[1]) + len(b.state()[1]) >= total)
    a.close()
    b.close()
    return {"first": first, "assign_a": assign_a, "assign_b": assign_b,
            "a": a.records[len(first):], "b": b.records}


def offsets():
    c = KafkaConsumer(**common, group_id=job["group"], **group_opts)
    c.commit({TopicPartition(topic, int(p)): OffsetAndMetadata(o, "") for p, o in job["commit"].items()})
    c.close()
    fresh = KafkaConsumer(**common, group_id=job["group"], **group_opts)
    got = {str(p): fresh.committed(TopicPartition(topic, p)) for p in range(job["partitions"])}
    fresh.close()
    return {"committed": got}


def admin():
    adm = KafkaAdminClient(**common, request_timeout_ms=30000)
    new = job["create_topic"]
    adm.create_topics([NewTopic(new, job["partitions"], 3, topic_configs=job["configs"])], timeout_ms=30000)
    def describe():
        configs = {}
        for resp in adm.describe_configs([ConfigResource(ConfigResourceType.TOPIC, new)]):
            for res in resp.resources:
                if res[0]:
                    raise UnknownTopicOrPartitionError(res[1]) if res[0] == 3 else \
                        RuntimeError("describe configs: error %d %s" % (res[0], res[1]))
                for entry in res[4]:
                    configs[entry[0]] = entry[1]
        return configs

    configs = until_known(describe, lambda e: isinstance(e, UnknownTopicOrPartitionError))
    adm.create_partitions({new: NewPartitions(job["grow_to"])}, timeout_ms=30000)
    c = KafkaConsumer(**common, metadata_max_age_ms=100)
    # Other brokers learn of the new partitions shortly after the answer.
    d = Deadline(30, "metadata shows %d partitions" % job["grow_to"])
    while d.check():
        partitions = len(c.partitions_for_topic(new) or [])
        if partitions == job["grow_to"]:
            break
        time.sleep(0.2)
    groups = [g for g, _ in adm.list_consumer_groups()]
    described = adm.describe_consumer_groups([job["group"]])[0]
    tps = [TopicPartition(topic, p) for p in range(job["partitions"])]
    earliest = {str(tp.partition): o for tp, o in c.beginning_offsets(tps).items()}
    latest = {str(tp.partition): o for tp, o in c.end_offsets(tps).items()}
    c.close()
    adm.delete_topics([job["delete_topic"]], timeout_ms=30000)
    adm.close()
    return {"configs": configs, "partitions": partitions, "groups": groups, "group_state": described.state,
            "group_protocol_type": described.protocol_type, "members": len(described.members),
            "earliest": earliest, "latest": latest}


run(job, {
    "produce": lambda: {"acks": produce(job["records"]), "idempotent": False,
                 "not_offered": {"idempotence": "kafka-python 2.0 has no idempotent producer"}},
    "consume": lambda: {"records": consume()},
    "groups": groups,
    "offsets": offsets,
    "admin": admin,
})
