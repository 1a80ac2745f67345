package clients

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/isrlab/isrlab/workloads"
)

// The clients that run as the reference drivers of python/ and js/, over
// the exec protocol: librdkafka through confluent-kafka-python, and
// kafka-python, each the Debian package's, for the system interpreter;
// kafkajs with Debian's Node.js, from the node_modules NODE_PATH names
// (kafkajs has no Debian package).
const (
	Librdkafka  = "librdkafka"
	KafkaPython = "kafka-python"
	Kafkajs     = "kafkajs"
)

// SystemPython runs the Python drivers: Debian's python3-* packages
// install for the system interpreter, which a python3 earlier on PATH
// (pyenv, a virtualenv) does not see.
var SystemPython = "/usr/bin/python3"

// pythonFlags: no bytecode next to the scripts, no PYTHON* variables and
// no user site directory, so that only Debian's packages are imported.
var pythonFlags = []string{"-B", "-E", "-s"}

// SystemNode runs the JavaScript drivers: Debian's nodejs.
var SystemNode = "/usr/bin/node"

//go:embed python/isrlab_exec.py python/librdkafka_driver.py python/kafkapython_driver.py js/isrlab_exec.js js/kafkajs_driver.js
var pythonFiles embed.FS

// pythonDriver is one client run by a script driver (Python or
// JavaScript).
type pythonDriver struct {
	script string // in python/ or js/
	pkg    string // its client's Debian package (npm's, for kafkajs)
	js     bool   // run by SystemNode, not SystemPython
}

var pythonDrivers = map[string]pythonDriver{
	Librdkafka:  {script: "librdkafka_driver.py", pkg: "python3-confluent-kafka"},
	KafkaPython: {script: "kafkapython_driver.py", pkg: "python3-kafka"},
	Kafkajs:     {script: "kafkajs_driver.js", pkg: "kafkajs", js: true},
}

// argv is the command line running d's script, written to dir.
func (d pythonDriver) argv(dir string) []string {
	if d.js {
		return []string{SystemNode, filepath.Join(dir, d.script)}
	}
	return append(append([]string{SystemPython}, pythonFlags...), filepath.Join(dir, d.script))
}

// checkPython checks what the client can do without running it, then asks
// the driver itself (started with --check, answering the hello the run
// would send it, asking for features): a missing interpreter or module, a
// setting the client refuses, or a feature the driver does not name in
// its hello, is an error when the scenario loads.
func checkPython(name string, spec workloads.ClientSpec, cfg workloads.Config, features ...string) error {
	if name == KafkaPython && cfg.Idempotent {
		return &workloads.CapabilityError{Client: name, Reason: "kafka-python has no idempotent producer (enable.idempotence)"}
	}
	return checkPythonHello(name, helloOf(cfg.WithDefaults(), spec.Config, nil, features...))
}

// checkPythonHello asks name's driver about hello (cached).
func checkPythonHello(name string, hello execHello) error {
	key, err := json.Marshal([]any{name, SystemPython, SystemNode, os.Getenv("NODE_PATH"), hello})
	if err != nil {
		return err
	}
	if v, ok := pythonChecks.Load(string(key)); ok {
		return v.(pythonCheck).err
	}
	err = probePython(name, hello)
	pythonChecks.Store(string(key), pythonCheck{err})
	return err
}

// CheckSecured reports whether the client spec names, checked with
// Check for workload kind and cfg, connects to a secured cluster:
// protocol (SSL, SASL_PLAINTEXT or SASL_SSL) with mechanism (SASL
// only). The in-process clients do (through the lab's
// dialer); an exec driver of the user's is asked when the run starts it
// (its hello must name FeatureSecurity); the reference drivers are asked
// now, with a hello whose security object has mechanism and a
// placeholder user and password (the run's are made when its cluster
// comes up): a driver, or a library, that cannot connect so refuses it.
func CheckSecured(spec workloads.ClientSpec, kind string, cfg workloads.Config, protocol, mechanism string) error {
	name := spec.Name()
	if _, ok := pythonDrivers[name]; !ok {
		return nil
	}
	var features []string
	switch kind {
	case "queue":
		features = append(features, FeatureQueue)
		cfg.Subscribe = true
	case "txn":
		features = append(features, FeatureTxn)
	}
	hello := helloOf(cfg.WithDefaults(), spec.Config, nil, append(features, FeatureSecurity)...)
	hello.Security = map[string]string{"security.protocol": protocol}
	if strings.HasPrefix(protocol, "SASL_") {
		hello.Security["sasl.mechanism"], hello.Security["sasl.username"], hello.Security["sasl.password"] = mechanism, "isrlab-check", "isrlab-check"
	}
	return checkPythonHello(name, hello)
}

// pythonChecks caches the drivers' answers: a matrix checks each cell.
var pythonChecks sync.Map

type pythonCheck struct{ err error }

// probePython runs the driver with --check.
func probePython(name string, hello execHello) error {
	reply, err := askPython(name, hello)
	if err != nil {
		return err
	}
	if reply.Type == "refused" {
		return &workloads.CapabilityError{Client: name, Reason: reply.Error}
	}
	for _, f := range hello.Features {
		if !slices.Contains(reply.Features, f) {
			return &workloads.CapabilityError{Client: name, Reason: fmt.Sprintf("its driver names no %q feature in its hello", f)}
		}
	}
	return nil
}

// askPython runs name's driver with --check and returns its answer to
// hello: its hello or its refusal.
func askPython(name string, hello execHello) (execHelloReply, error) {
	d := pythonDrivers[name]
	interp, install := SystemPython, "install Debian packages python3 and "+d.pkg+" (scripts/deps.sh clients does)"
	if d.js {
		interp, install = SystemNode, "install Debian package nodejs (scripts/deps.sh clients does) and kafkajs where NODE_PATH points (no Debian package)"
	}
	if _, err := os.Stat(interp); err != nil {
		return execHelloReply{}, &workloads.CapabilityError{Client: name, Reason: fmt.Sprintf("%s: %v: %s", interp, errors.Unwrap(err), install)}
	}
	dir, err := writePythonDrivers("")
	if err != nil {
		return execHelloReply{}, err
	}
	defer os.RemoveAll(dir)
	line, err := json.Marshal(hello)
	if err != nil {
		return execHelloReply{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	argv := append(d.argv(dir), "--check")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(append(line, '\n'))
	stderr := &tail{max: 2048}
	cmd.Stderr = stderr
	out, err := cmd.Output()
	var reply execHelloReply
	first, _, _ := bytes.Cut(out, []byte("\n"))
	if jerr := json.Unmarshal(first, &reply); jerr != nil || (reply.Type != "hello" && reply.Type != "refused") {
		return reply, fmt.Errorf("client %s: check the driver (%s --check): %v, printed %q%s", name, strings.Join(d.argv(dir), " "), err, clip(out), stderr.last())
	}
	return reply, nil
}

// writePythonDrivers writes the drivers to a new directory named after
// the run, for the interpreter to run; the caller removes it.
func writePythonDrivers(runID string) (string, error) {
	prefix := "isrlab-drivers-"
	if runID != "" {
		prefix = "isrlab-" + runID + "-drivers-"
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("write the python drivers: %w", err)
	}
	for _, sub := range []string{"python", "js"} {
		entries, rerr := pythonFiles.ReadDir(sub)
		if err = rerr; err != nil {
			break
		}
		for _, e := range entries {
			var b []byte
			if b, err = pythonFiles.ReadFile(sub + "/" + e.Name()); err != nil {
				break
			}
			if err = os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("write the python drivers: %w", err)
	}
	return dir, nil
}

// newPython returns the exec client running name's driver with the system
// interpreter; its Close removes the scripts.
func newPython(name string, cfg workloads.Config, spec workloads.ClientSpec, env Env) (workloads.Client, error) {
	dir, err := writePythonDrivers(env.RunID)
	if err != nil {
		return nil, err
	}
	argv := pythonDrivers[name].argv(dir)
	e := newExec(cfg, workloads.ClientSpec{Client: Exec, Exec: argv, Config: spec.Config}, env)
	e.name, e.cleanup = name, func() { os.RemoveAll(dir) }
	return e, nil
}

// PythonVersion is the client a Python driver names in its hello, or
// "" and what is missing when it cannot run (tests skip with it).
func PythonVersion(name string) (string, string) {
	reply, err := askPython(name, helloOf(workloads.Config{}.WithDefaults(), nil, nil))
	switch {
	case err != nil:
		return "", err.Error()
	case reply.Type != "hello":
		if pythonDrivers[name].js {
			return "", fmt.Sprintf("kafkajs where NODE_PATH points (%s)", reply.Error)
		}
		return "", fmt.Sprintf("Debian package %s (%s)", pythonDrivers[name].pkg, reply.Error)
	}
	return reply.Client, ""
}

// CleanStaleDrivers removes the driver directories (writePythonDrivers)
// that runs left in the temporary directory when they died before
// removing them: those of runs alive reports gone. It returns the
// directories removed. isrlab clean calls it.
func CleanStaleDrivers(alive func(run string) bool) ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), "isrlab-*-drivers-*"))
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, d := range dirs {
		run, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), "isrlab-"), "-drivers-")
		if !ok || run == "" || alive(run) {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, d)
	}
	return removed, errors.Join(errs...)
}
