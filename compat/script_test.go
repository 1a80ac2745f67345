package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isrlab/isrlab/internal/proctest"
)

// Debian's python3-* packages install for the system interpreter, which a
// python3 earlier on PATH (pyenv, a virtualenv) does not see.
const systemPython = "/usr/bin/python3"

// scriptClient is a row whose client runs as a script: argv gets the job
// as JSON on stdin and prints one JSON result on stdout.
func scriptClient(name string, missing func() string, argv ...string) client {
	return client{name: name, missing: missing, run: func(ctx context.Context, t *testing.T, j job) (result, error) {
		in, err := json.Marshal(j)
		if err != nil {
			return result{}, err
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdin = bytes.NewReader(in)
		// No __pycache__ in the source tree.
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		cmd.WaitDelay = 5 * time.Second
		start := time.Now()
		err = cmd.Run()
		t.Logf("%s %s: %v, exit %v", filepath.Base(argv[len(argv)-1]), j.Capability, time.Since(start).Round(time.Millisecond), err)
		if err == nil && errOut.Len() > 0 {
			t.Logf("stderr:\n%s", proctest.Tail(errOut.String(), 20))
		}
		if err != nil {
			return result{}, fmt.Errorf("%s: %w\nstderr:\n%s", strings.Join(argv, " "), err, proctest.Tail(errOut.String(), 40))
		}
		var r result
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			return result{}, fmt.Errorf("%s printed %q: %w\nstderr:\n%s", strings.Join(argv, " "), out.String(), err, proctest.Tail(errOut.String(), 40))
		}
		return r, nil
	}}
}

// pythonModule says what is missing for a script that imports module.
func pythonModule(module, pkg string) func() string {
	return func() string {
		if _, err := os.Stat(systemPython); err != nil {
			return systemPython + " (Debian python3)"
		}
		if out, err := exec.Command(systemPython, "-c", "import "+module).CombinedOutput(); err != nil {
			return fmt.Sprintf("Debian package %s (%s cannot import %s: %s)", pkg, systemPython, module, strings.TrimSpace(proctest.Tail(string(out), 1)))
		}
		return ""
	}
}

// nodeModule says what is missing for the kafkajs script: node, or
// js/node_modules (not a Debian package: installed there by hand, npm ci).
func nodeModule(module string) func() string {
	return func() string {
		if _, err := exec.LookPath("node"); err != nil {
			return "node (Debian nodejs)"
		}
		if _, err := os.Stat(filepath.Join("js", "node_modules", module, "package.json")); err != nil {
			return "npm package " + module + " in compat/js/node_modules (no Debian package; npm ci in compat/js by hand)"
		}
		return ""
	}
}

func confluentPython() client {
	return scriptClient("confluent-kafka-python", pythonModule("confluent_kafka", "python3-confluent-kafka"), systemPython, "python/confluent.py")
}

func kafkaPython() client {
	return scriptClient("kafka-python", pythonModule("kafka", "python3-kafka"), systemPython, "python/kafkapython.py")
}

func kafkajs() client {
	return scriptClient("kafkajs", nodeModule("kafkajs"), "node", "js/kafkajs.js")
}
