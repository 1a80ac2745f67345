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
"""
import sys

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
               "value_deserializer", "partitioner", "enable_auto_commit"}

# kafka-python 2.0.2 probes the broker's version at every new client unless
# api_version is given, and a probe that fails under a fault makes the
# constructor raise; the driver names one (client.config can override it).
API_VERSION = (2, 5, 0)


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
        return ["security"]

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


if __name__ == "__main__":
    sys.exit(serve(Client()))
