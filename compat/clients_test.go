package compat

// clients lists the rows of the matrix, in the order docs/compatibility.md
// shows them.
func clients() []client {
	return []client{
		franz(),
		confluentPython(),
		kafkaPython(),
		kafkajs(),
	}
}
