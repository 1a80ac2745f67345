"""Table tests of the Python drivers' outcome mappings and hellos, run by
TestPythonOutcome (workloads/clients/python_test.go) with the system
python3: python3 -m unittest test_outcomes (in this directory)."""
import io
import json
import os
import signal
import subprocess
import sys
import types
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


class FakeClock:
    """A clock that each call advances by a second."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1
        return self.t


class FakeTxnProducer:
    """commit_transaction and abort_transaction raising the KafkaErrors
    given in turn (None: it returns); the last repeats."""

    def __init__(self, commits, aborts):
        self.commits, self.aborts = list(commits), list(aborts)

    @staticmethod
    def step(errs):
        err = errs.pop(0) if len(errs) > 1 else errs[0]
        if err is not None:
            raise rd.KafkaException(err)

    def commit_transaction(self, timeout):
        self.step(self.commits)

    def abort_transaction(self, timeout):
        self.step(self.aborts)


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

    def test_commit_outcome(self):
        E = rd.KafkaError

        def TP(topic, partition, offset, err=None):
            return types.SimpleNamespace(topic=topic, partition=partition, offset=offset, error=err)

        def parts(*errs):
            return [TP("t", i, 10 + i, None if code is None else E(code)) for i, code in enumerate(errs)]

        both = [{"partition": 0, "offset": 10}, {"partition": 1, "offset": 11}]
        for name, err, ps, want in [
            ("committed", None, parts(None, None), ("ok", both)),
            ("one refused", None, parts(None, E.ILLEGAL_GENERATION), ("ok", both[:1])),
            # A refusal may answer a retry of a request already applied.
            ("all refused", None, parts(E.ILLEGAL_GENERATION, E.ILLEGAL_GENERATION), ("info", both)),
            ("refused, raised", E(E.REBALANCE_IN_PROGRESS), parts(None, None), ("info", both)),
            ("timed out", E(E._TIMED_OUT), parts(None, None), ("info", both)),
            ("connection broken", E(E._TRANSPORT), parts(None, None), ("info", both)),
            ("no coordinator", E(E.NOT_COORDINATOR), parts(None, None), ("info", both)),
            # librdkafka wrote no request.
            ("nothing to commit", E(E._NO_OFFSET), parts(None, None), ("fail", [])),
            ("an invalid offset is not asked", None, [TP("t", 0, 10), TP("t", 1, rd.confluent_kafka.OFFSET_INVALID)],
             ("ok", both[:1])),
        ]:
            with self.subTest(name=name):
                typ, committed, _ = rd.commit_outcome(err, ps)
                self.assertEqual((typ, committed), want)

    def test_end_step(self):
        E = rd.KafkaError
        for code, commit, flags, want in [
            (E._TIMED_OUT, True, {"retriable": True}, "retry"),
            (E.COORDINATOR_NOT_AVAILABLE, True, {"retriable": True}, "retry"),
            (E._TIMED_OUT, False, {"retriable": True}, "retry"),
            (E.PRODUCER_FENCED, True, {"fatal": True}, "info"),
            (E.INVALID_TXN_STATE, True, {"fatal": True}, "info"),
            (E.PRODUCER_FENCED, False, {"fatal": True}, "info"),
            # Messages of the transaction failed delivery: before any EndTxn.
            (E._INCONSISTENT, True, {"txn_requires_abort": True}, "abort-fail"),
            # An EndTxn refused after an attempt whose answer was lost.
            (E.UNKNOWN_PRODUCER_ID, True, {"txn_requires_abort": True}, "abort-info"),
            (E.INVALID_PRODUCER_ID_MAPPING, True, {"txn_requires_abort": True}, "abort-info"),
            (E._MSG_TIMED_OUT, True, {"txn_requires_abort": True}, "abort-info"),
            (E._STATE, True, {}, "info"),
            (E._STATE, False, {}, "info"),
            (E._MSG_TIMED_OUT, False, {"txn_requires_abort": True}, "info"),
        ]:
            with self.subTest(code=E(code).name(), commit=commit, flags=flags):
                self.assertEqual(rd.end_step(commit, E(code, **flags)), want)

    def test_end_transaction(self):
        E = rd.KafkaError
        timeout = E(E._TIMED_OUT, "timed out", retriable=True)
        abortable = E(E._INCONSISTENT, "1 message(s) failed delivery", txn_requires_abort=True)
        lost = E(E.UNKNOWN_PRODUCER_ID, "EndTxn commit failed", txn_requires_abort=True)
        fenced = E(E.PRODUCER_FENCED, "fenced", fatal=True)
        for name, commit, commits, aborts, want in [
            ("committed", True, [None], [], ("ok", False)),
            ("committed after a retried timeout", True, [timeout, timeout, None], [], ("ok", False)),
            ("commit timed out to the deadline", True, [timeout] * 50, [], ("info", True)),
            ("aborted", False, [], [None], ("fail", False)),
            ("abortable, aborted", True, [abortable], [None], ("fail", False)),
            ("abortable, the abort not confirmed", True, [abortable], [fenced], ("fail", True)),
            ("EndTxn given up, aborted", True, [lost], [None], ("info", False)),
            ("EndTxn given up, the abort fenced", True, [lost], [fenced], ("info", True)),
            ("fenced at commit", True, [fenced], [], ("info", True)),
            ("abort fenced", False, [], [fenced], ("info", True)),
            ("abort timed out to the deadline", False, [], [timeout] * 50, ("info", True)),
        ]:
            with self.subTest(name=name):
                p, clock = FakeTxnProducer(commits, aborts), FakeClock()
                typ, err, done = rd.end_transaction(p, commit, 10, clock)
                self.assertEqual((typ, done), want, err)
                if typ == "ok":
                    self.assertEqual(err, "")

    def test_leave_before_close(self):
        """A member that crashes or closes leaves the group first
        (unsubscribe, then polls until its partitions are revoked), so that
        close() runs no rebalance callback, where librdkafka can hang."""

        class Consumer:
            def __init__(self, member, revoke_after):
                self.member, self.revoke_after, self.calls = member, revoke_after, []

            def store_offsets(self, offsets=None, message=None):
                self.calls.append(("store", sorted((o.partition, o.offset) for o in offsets)))

            def unsubscribe(self):
                self.calls.append(("unsubscribe",))
                if self.revoke_after is None:
                    raise rd.KafkaException(rd.KafkaError(rd.KafkaError._STATE))

            def poll(self, timeout):
                self.calls.append(("poll",))
                if self.revoke_after == -1:
                    raise RuntimeError("Consumer closed")
                if self.revoke_after is not None and sum(c == ("poll",) for c in self.calls) >= self.revoke_after:
                    self.member.on_revoke(self, [])

            def close(self):
                self.calls.append(("close", list(self.member.assigned)))

        def member(revoke_after, assigned):
            m = object.__new__(rd.GroupConsumer)
            m.topic, m.auto_commit, m.evs, m.crashed, m.assigned = "t", True, [], False, assigned
            m.c = Consumer(m, revoke_after)
            return m

        inv = rd.confluent_kafka.OFFSET_INVALID
        for name, revoke_after, assigned, crash, want in [
            ("crash: revoked at the first poll", 1, [0, 2], True,
             [("store", [(0, inv), (2, inv)]), ("unsubscribe",), ("poll",), ("close", [])]),
            ("close: revoked at the third poll", 3, [1], False,
             [("unsubscribe",), ("poll",), ("poll",), ("poll",), ("close", [])]),
            ("no partitions: one poll", 1, [], False, [("unsubscribe",), ("poll",), ("close", [])]),
            ("never revoked: closed at the deadline", 99, [1], False,
             [("unsubscribe",)] + [("poll",)] * int(rd.LEAVE_WAIT) + [("close", [1])]),
            ("unsubscribe refused: closed at once", None, [1], False, [("unsubscribe",), ("close", [1])]),
            ("a poll failed: closed at once", -1, [1], False, [("unsubscribe",), ("poll",), ("close", [1])]),
        ]:
            with self.subTest(name=name):
                clock = FakeClock()
                m = member(revoke_after, assigned)
                c = m.c
                real = rd.GroupConsumer.leave
                m.leave = lambda c: real(m, c, clock)
                m.crash() if crash else m.close()
                self.assertEqual(c.calls, want)
                self.assertIsNone(m.c)

    def test_hello(self):
        self.assertEqual(answer(rd.Client(), hello())["type"], "hello")
        self.assertEqual(answer(rd.Client(), hello())["features"], ["txn", "queue", "security"])
        # A secured cluster's settings go to every handle, sasl.mechanism
        # as librdkafka's sasl.mechanisms, SCRAM as any other mechanism.
        sec = hello()
        sec["features"] = ["security"]
        sec["security"] = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u",
                           "sasl.password": "pw"}
        self.assertEqual(answer(rd.Client(), sec)["type"], "hello")
        conf = rd.Client().producer_conf(sec, 0)
        self.assertEqual((conf["security.protocol"], conf["sasl.mechanisms"], conf["sasl.password"]), ("SASL_SSL", "PLAIN", "pw"))
        self.assertNotIn("sasl.mechanism", conf)
        sec["security"]["sasl.mechanism"] = "SCRAM-SHA-512"
        self.assertEqual(answer(rd.Client(), sec)["type"], "hello")
        queue = hello()
        queue["features"] = ["queue"]
        self.assertEqual(answer(rd.Client(), queue)["type"], "hello")
        queue["client.config"] = {"auto.commit.interval.ms": "100"}
        self.assertEqual(answer(rd.Client(), queue),
                         {"type": "refused", "error": "client.config.auto.commit.interval.ms: set by the driver"})
        queue["client.config"] = {"session.timeout.ms": "often"}
        self.assertEqual(answer(rd.Client(), queue)["type"], "refused")
        txn = hello(**{"transaction.timeout.ms": "15000"})
        txn["features"] = ["txn"]
        self.assertEqual(answer(rd.Client(), txn)["type"], "hello")
        txn["client.config"] = {"message.timeout.ms": "60000"}
        a = answer(rd.Client(), txn)
        self.assertEqual(a["type"], "refused")
        self.assertIn("`message.timeout.ms` must be set <= `transaction.timeout.ms`", a["error"])
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
        self.assertEqual(a["features"], ["queue", "security"])
        queue = hello(**{"enable.idempotence": "false"}, own={"session_timeout_ms": "6000"})
        queue["features"] = ["queue"]
        self.assertEqual(answer(kp.Client(), queue)["type"], "hello")
        queue["client.config"] = {"auto_commit_interval_ms": "100"}
        a = answer(kp.Client(), queue)
        self.assertEqual(a, {"type": "refused", "error": "client.config.auto_commit_interval_ms: set by the driver"})
        # A secured cluster's settings in kafka-python's names.
        sec = hello(**{"enable.idempotence": "false"})
        sec["features"] = ["security"]
        sec["security"] = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                           "sasl.password": "pw", "ssl.ca.location": "/ca.pem"}
        self.assertEqual(answer(kp.Client(), sec)["type"], "hello")
        self.assertEqual(kp.security_conf(sec), {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                                 "sasl_plain_username": "u", "sasl_plain_password": "pw",
                                                 "ssl_cafile": "/ca.pem"})
        sec["security"]["sasl.mechanism"] = "SCRAM-SHA-1"
        a = answer(kp.Client(), sec)
        self.assertEqual(a["type"], "refused")
        self.assertIn("sasl.mechanism SCRAM-SHA-1: kafka-python", a["error"])
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

    def test_commit_outcome(self):
        E = kp.Errors
        offs = {kp.kafka.TopicPartition("t", 1): kp.kafka.OffsetAndMetadata(11, ""),
                kp.kafka.TopicPartition("t", 0): kp.kafka.OffsetAndMetadata(10, "")}
        both = [{"partition": 0, "offset": 10}, {"partition": 1, "offset": 11}]
        for name, err, written, want in [
            ("committed", None, True, ("ok", both)),
            # Nothing was written: the lookup failed, or each attempt failed
            # before it was sent.
            ("no coordinator", E.GroupCoordinatorNotAvailableError(), False, ("fail", [])),
            ("no generation", E.CommitFailedError(), False, ("fail", [])),
            ("node not ready", E.NodeNotReadyError(1), False, ("fail", [])),
            # An attempt was written: its answer, or an earlier one's, is lost.
            ("refused after a retry", E.CommitFailedError(), True, ("info", both)),
            ("timed out", E.RequestTimedOutError(), True, ("info", both)),
            ("connection broken", E.KafkaConnectionError(), True, ("info", both)),
            ("one partition refused", E.OffsetMetadataTooLargeError(), True, ("info", both)),
        ]:
            with self.subTest(name=name):
                typ, committed, _ = kp.commit_outcome(err, offs, written)
                self.assertEqual((typ, committed), want)

    def test_unsent(self):
        F = kp.kafka.future.Future
        self.assertTrue(kp.unsent(F().failure(kp.Errors.NodeNotReadyError(1))))
        self.assertTrue(kp.unsent(F().failure(kp.Errors.GroupCoordinatorNotAvailableError)))
        self.assertFalse(kp.unsent(F()))  # queued: written by a later poll
        self.assertFalse(kp.unsent(F().success(None)))  # nothing to commit: no request, but nothing refused either

    def test_group_commits(self):
        """The member's commit tracking on a stand-in coordinator with
        kafka-python 2.0's shape: commit_offsets_sync retries what fails
        retriably through self._send_offset_commit_request."""
        E = kp.Errors
        tp = kp.kafka.TopicPartition("t", 0)

        class Coordinator:
            def __init__(self):
                self.steps, self.auto = [], []

            def _send_offset_commit_request(self, offsets):
                how, self.answer = self.steps.pop(0)
                f = kp.kafka.future.Future()
                if how == "unsent":
                    f.failure(self.answer)
                return f  # else queued, answered later

            def commit_offsets_sync(self, offsets):
                while True:
                    f = self._send_offset_commit_request(offsets)
                    if not f.is_done:
                        f.success(None) if self.answer is None else f.failure(self.answer)
                    if f.succeeded():
                        return
                    if not f.retriable() or not self.steps:
                        raise f.exception

            def _commit_offsets_async_on_complete(self, offsets, exc):
                self.auto.append(exc)

        class Consumer:
            def __init__(self):
                self._coordinator = Coordinator()

            def subscribe(self, topics, listener):
                self.listener = listener

            def commit(self, offsets):
                self._coordinator.commit_offsets_sync(offsets)

            def close(self, autocommit=True):
                self.closed = autocommit

        at = [{"partition": 0, "offset": 7}]
        for name, steps, want in [
            ("committed", [("sent", None)], "ok"),
            ("committed on a retry", [("sent", E.RequestTimedOutError()), ("sent", None)], "ok"),
            ("never sent", [("unsent", E.NodeNotReadyError(1)), ("unsent", E.CommitFailedError())], "fail"),
            ("refused after a timeout", [("sent", E.RequestTimedOutError()), ("unsent", E.CommitFailedError())], "info"),
            ("refused", [("sent", E.CommitFailedError())], "info"),
        ]:
            with self.subTest(name=name):
                c = Consumer()
                m = kp.GroupConsumer(c, "t", False)
                c._coordinator.steps = list(steps)
                typ, committed, _ = m.commit(at, 5)
                self.assertEqual(typ, want)
                self.assertEqual(committed, [] if want == "fail" else at)
                self.assertEqual(m.take_events(), [])  # a manual commit is the operation's answer
                self.assertEqual(m.written, {})

        # Auto-commits: reported as events, an async one by its callback,
        # which kafka-python's own handling still gets.
        c = Consumer()
        m = kp.GroupConsumer(c, "t", True)
        coord = c._coordinator
        c.listener.on_partitions_assigned({tp, kp.kafka.TopicPartition("other", 3)})
        sent = {tp: kp.kafka.OffsetAndMetadata(7, "")}
        coord.steps = [("sent", E.RequestTimedOutError())]
        coord._send_offset_commit_request(sent)
        coord._commit_offsets_async_on_complete(sent, E.RequestTimedOutError())
        looked_up = {tp: kp.kafka.OffsetAndMetadata(8, "")}  # the coordinator lookup failed: never sent
        coord._commit_offsets_async_on_complete(looked_up, E.NodeNotReadyError(1))
        coord._commit_offsets_async_on_complete({}, None)  # nothing to commit: not reported
        coord.steps = [("sent", None)]
        coord.commit_offsets_sync({tp: kp.kafka.OffsetAndMetadata(9, "")})  # before a rebalance
        c.listener.on_partitions_revoked({tp})
        self.assertEqual([(e["event"], e.get("type"), e.get("committed") or e.get("partitions")) for e in m.take_events()], [
            ("assigned", None, [0]),
            ("committed", "info", at),
            ("committed", "fail", None),
            ("committed", "ok", [{"partition": 0, "offset": 9}]),
            ("assigned", None, []),
        ])
        self.assertEqual(len(coord.auto), 3)
        self.assertEqual(m.written, {})
        # A crash commits nothing and reports nothing more.
        m.crash()
        self.assertFalse(c.closed)
        coord._commit_offsets_async_on_complete(sent, None)
        self.assertEqual(m.take_events(), [])


if __name__ == "__main__":
    unittest.main()


class Serve(unittest.TestCase):
    def test_quit_prints_stacks(self):
        """A driver the lab takes for hung gets SIGQUIT before it is
        killed: it prints every thread's stack on stderr and goes on."""
        code = ("import sys, isrlab_exec\n"
                "class C:\n"
                "    def name(self): return 'fake'\n"
                "    def check(self, h): return None\n"
                "sys.exit(isrlab_exec.serve(C()))\n")
        p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=os.path.dirname(os.path.abspath(__file__)))
        try:
            p.stdin.write((json.dumps(HELLO) + "\n").encode())
            p.stdin.flush()
            self.assertEqual(json.loads(p.stdout.readline())["type"], "hello")
            p.send_signal(signal.SIGQUIT)
            _, err = p.communicate(timeout=60)
        finally:
            p.kill()
        err = err.decode()
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("(most recent call first):", err)
        self.assertIn("in serve", err)
