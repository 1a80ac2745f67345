// Package scenarios is isrlab's scenario library, embedded in the binary so
// that `isrlab run NAME` and `isrlab scenarios` work from any directory:
// presets/ (configuration presets a scenario names), the scenarios, each
// named after what happens (zombie-leader/acks1; a file's aliases: are the
// old names it still answers to, such as seed000/partition-4-acks1), and
// matrices/.
package scenarios

import "embed"

// FS holds every scenario, preset and matrix file.
//
//go:embed *.yaml */*.yaml
var FS embed.FS
