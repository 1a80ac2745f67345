package compat

import "github.com/IBM/sarama"

// clients lists the rows of the matrix, in the order docs/compatibility.md
// shows them.
func clients() []client {
	return []client{
		franz(),
		saramaRow(sarama.V0_10_2_0),
		saramaRow(sarama.V2_0_0_0),
		saramaRow(sarama.MaxVersion),
		kafkaGo(),
		kcat(),
		confluentPython(),
		kafkaPython(),
		kafkajs(),
	}
}
