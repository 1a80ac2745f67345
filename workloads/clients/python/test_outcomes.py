"""Table tests of the Python drivers' outcome mappings and hellos, run by
TestPythonOutcome (workloads/clients/python_test.go) with the system
python3: python3 -m unittest test_outcomes (in this directory)."""
import io
import json
import unittest

import isrlab_exec
import kafkapython_driver as kp
import librdkafka_driver as rd

HELLO = {"type": "hello", "protocol": 1, "bootstrap": [], "topic": "t", "partitions": 1,
         "config": {"acks": "all", "enable.idempotence": "true", "retries": "2147483647", "request.timeout.ms": "10000",
                    "delivery.timeout.ms": "30000", "linger.ms": "0"}}


def hello(**kw):
    h = json.loads(json.dumps(HELLO))
    own = kw.pop("own", None)
    h["config"].update(kw)
    if own is not None:
        h["client.config"] = own
    return h


def answer(client, h):
    out = io.StringIO()
    isrlab_exec.serve(client, ["--check"], io.StringIO(json.dumps(h) + "\n"), out)
    return json.loads(out.getvalue().splitlines()[0])


@unittest.skipIf(rd.IMPORT_ERROR, "confluent-kafka-python is not installed (Debian python3-confluent-kafka)")
class Librdkafka(unittest.TestCase):
    def test_outcome(self):
        E = rd.KafkaError
        for code, sent_once, produced, want in [
            (E._MSG_TIMED_OUT, False, True, "info"),
            (E._MSG_TIMED_OUT, True, True, "info"),
            (E._TIMED_OUT, True, True, "info"),
            (E._TRANSPORT, True, True, "info"),
            (E._PURGE_INFLIGHT, True, True, "info"),
            (E._FATAL, False, True, "info"),
            (E.REQUEST_TIMED_OUT, True, True, "info"),
            (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, True, True, "info"),
            (E.NOT_LEADER_FOR_PARTITION, True, True, "info"),
            (E.OUT_OF_ORDER_SEQUENCE_NUMBER, False, True, "info"),
            (E.NOT_ENOUGH_REPLICAS, False, True, "info"),
            (E.NOT_ENOUGH_REPLICAS, True, True, "fail"),
            (E.UNKNOWN_TOPIC_OR_PART, True, True, "fail"),
            (E.MSG_SIZE_TOO_LARGE, False, True, "fail"),
            (E.INVALID_REQUIRED_ACKS, False, True, "fail"),
            (E.TOPIC_AUTHORIZATION_FAILED, False, True, "fail"),
            (E._UNKNOWN_PARTITION, False, True, "fail"),
            (E._UNKNOWN_TOPIC, False, True, "fail"),
            (E._PURGE_QUEUE, False, True, "fail"),
            (E._QUEUE_FULL, False, False, "fail"),
            (E._FATAL, False, False, "fail"),
        ]:
            with self.subTest(code=E(code).name(), sent_once=sent_once, produced=produced):
                self.assertEqual(rd.outcome(E(code), sent_once, produced), want)

    def test_hello(self):
        self.assertEqual(answer(rd.Client(), hello())["type"], "hello")
        self.assertIn("librdkafka 2.", answer(rd.Client(), hello())["client"])
        for h, want in [
            (hello(acks="1"), "`acks` must be set to `all` when `enable.idempotence` is true"),
            (hello(own={"linger.msx": "5"}), 'No such configuration property: "linger.msx"'),
            (hello(own={"bootstrap.servers": "x:9092"}), "client.config.bootstrap.servers: set by the driver"),
        ]:
            with self.subTest(want=want):
                a = answer(rd.Client(), h)
                self.assertEqual(a["type"], "refused")
                self.assertIn(want, a["error"])


@unittest.skipIf(kp.IMPORT_ERROR, "kafka-python is not installed (Debian python3-kafka)")
class KafkaPython(unittest.TestCase):
    def test_outcome(self):
        E = kp.Errors
        never_drained = E.KafkaTimeoutError("Batch for TopicPartition(topic='t', partition=0) containing 1 record(s) "
                                            "expired: 10 seconds have passed since batch creation plus linger time")
        retried = E.KafkaTimeoutError("Batch for TopicPartition(topic='t', partition=0) containing 1 record(s) "
                                      "expired: 10 seconds have passed since last attempt plus backoff time")
        for err, sent_once, appended, want in [
            (never_drained, False, True, "fail"),
            (retried, False, True, "info"),
            (E.KafkaTimeoutError("Timeout after waiting for 30.0 secs."), False, True, "info"),
            (E.KafkaTimeoutError("Failed to update metadata after 30.0 secs."), False, False, "fail"),
            (AssertionError("Unrecognized partition"), False, False, "fail"),
            (E.MessageSizeTooLargeError(), False, False, "fail"),
            (E.KafkaConnectionError("socket disconnected"), True, True, "info"),
            (E.RequestTimedOutError("Request timed out after 2000 ms"), True, True, "info"),
            (E.NotEnoughReplicasAfterAppendError(), True, True, "info"),
            (E.NotLeaderForPartitionError(), True, True, "info"),
            (E.NotEnoughReplicasError(), False, True, "info"),
            (E.NotEnoughReplicasError(), True, True, "fail"),
            (E.NodeNotReadyError(1), True, True, "fail"),
            (E.NodeNotReadyError(1), False, True, "info"),
            (E.MessageSizeTooLargeError(), False, True, "fail"),
            (E.InvalidRequiredAcksError(), False, True, "fail"),
            (E.TopicAuthorizationFailedError(), False, True, "fail"),
        ]:
            with self.subTest(err=repr(err), sent_once=sent_once, appended=appended):
                self.assertEqual(kp.outcome(err, sent_once, appended), want)

    def test_hello(self):
        a = answer(kp.Client(), hello(**{"enable.idempotence": "false"}))
        self.assertEqual(a["type"], "hello")
        self.assertTrue(a["client"].startswith("kafka-python "), a["client"])
        self.assertEqual(a["features"], [])
        txn = hello(**{"enable.idempotence": "false"})
        txn["features"] = ["txn"]
        a = answer(kp.Client(), txn)
        self.assertEqual(a, {"type": "refused", "error": "this driver does not run the protocol's 'txn' feature"})
        for h, want in [
            (hello(), "kafka-python has no idempotent producer (enable.idempotence)"),
            (hello(**{"enable.idempotence": "false"}, own={"lingerms": "5"}), "neither KafkaProducer nor KafkaConsumer has lingerms"),
            (hello(**{"enable.idempotence": "false"}, own={"linger_ms": "soon"}), "client.config.linger_ms: 'soon' is not an integer"),
            (hello(**{"enable.idempotence": "false"}, own={"partitioner": "x"}), "client.config.partitioner: set by the driver"),
        ]:
            with self.subTest(want=want):
                a = answer(kp.Client(), h)
                self.assertEqual(a["type"], "refused")
                self.assertIn(want, a["error"])


if __name__ == "__main__":
    unittest.main()
