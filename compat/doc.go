// Package compat holds isrlab's client compatibility matrix: its tests run
// real Kafka clients (franz-go, sarama at several Version settings,
// segmentio/kafka-go, librdkafka through kcat and confluent-kafka-python,
// kafka-python, kafkajs) against a 3-broker isrlab cluster, one subtest per
// client and capability:
//
//	go test ./compat/ -run 'TestClients/kafkajs/groups' -v
//
// The Python and JavaScript clients run as the scripts in python/ and js/:
// each reads one job as JSON on stdin and prints its result as JSON on
// stdout, and the Go side checks the result against what the cluster holds.
// `-matrix FILE` writes the table docs/compatibility.md shows.
package compat
