// Package scenarios is isrlab's scenario library, embedded in the binary so
// that `isrlab run NAME` and `isrlab scenarios` work from any directory:
// presets/ (configuration presets a scenario names), the seed scenarios
// (seed000/, seed003/, kip101/, power-loss/) and matrices/.
package scenarios

import "embed"

// FS holds every scenario, preset and matrix file.
//
//go:embed *.yaml */*.yaml
var FS embed.FS
