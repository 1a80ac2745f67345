package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sys/unix"

	"github.com/isrlab/isrlab/compose"
	"github.com/isrlab/isrlab/kafkaconfig"
	"github.com/isrlab/isrlab/workloads"
	"github.com/isrlab/isrlab/workloads/clients"
)

// DriverLogFile is where in a run's directory (under nodes/client1/) an
// exec driver's standard error goes, with its threads' stacks when the
// lab took it for hung.
const DriverLogFile = "driver.log"

// clientRun is what a run's clients are named after and write to.
type clientRun struct {
	ID string
	// DriverLog is the exec driver's stderr ("": none kept).
	DriverLog string
}

// newClient returns the driver of the workload's client (nil for
// franz-go), dialing as opts do and starting an exec driver where the
// lab's clients dial from.
func newClient(w Workload, run clientRun, auth *clientAuth, seeds []string, opts []kgo.Opt) (workloads.Client, error) {
	if w.ClientSpec.Name() == clients.FranzGo {
		return nil, nil
	}
	dial, err := workloads.DialOf(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...))
	if err != nil {
		return nil, err
	}
	env := clients.Env{RunID: run.ID, Seeds: seeds, Dial: dial, Start: startWhereDialed(dial, seeds), DriverLog: run.DriverLog}
	if auth != nil {
		env.SASL, env.Security = auth.SASL, auth.Security
	}
	return clients.New(w.ClientSpec, w.Config, env)
}

// clientAuth is how the workload's clients connect to a secured cluster;
// nil for a plaintext one.
type clientAuth struct {
	// SASL authenticates the in-process drivers (the dialer of
	// c.KafkaOpts does the TLS handshake); nil without SASL.
	SASL *clients.SASL
	// Security is the whole client security, for the exec drivers,
	// which do TLS and SASL themselves.
	Security *kafkaconfig.ClientSecurity
}

// clientAuthOf is how the workload's clients connect to c.
func clientAuthOf(c *compose.Cluster) (*clientAuth, error) {
	cs, err := c.ClientSecurity()
	if err != nil || cs == nil {
		return nil, err
	}
	auth := &clientAuth{Security: cs}
	if !cs.SASL() {
		return auth, nil
	}
	user, pw, err := cs.Credentials()
	if err != nil {
		return nil, err
	}
	auth.SASL = &clients.SASL{Mechanism: cs.Mechanism, User: user, Password: pw}
	return auth, nil
}

// startWhereDialed returns a function that starts a command in the network
// namespace of the connections dial makes (the client host's, for a
// cluster the lab laid out), so that an exec driver reaches the brokers
// as the lab's own clients do and a fault that cuts the client host cuts
// it too. The namespace is the one of a connection to a seed broker
// (SIOCGSKNS), under its TLS on a secured cluster.
func startWhereDialed(dial workloads.DialFunc, seeds []string) func(*exec.Cmd) error {
	return func(cmd *exec.Cmd) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var conn net.Conn
		var err error
		for _, s := range seeds {
			if conn, err = dial(ctx, "tcp", s); err == nil {
				break
			}
		}
		if conn == nil {
			return fmt.Errorf("find the client host's namespace: dial the seed brokers: %w", errors.Join(err, errors.New("no seeds")))
		}
		defer conn.Close()
		// On a secured cluster the dialer hands back its TLS connection:
		// the socket is under it.
		for {
			w, ok := conn.(interface{ NetConn() net.Conn })
			if !ok {
				break
			}
			conn = w.NetConn()
		}
		sc, ok := conn.(syscall.Conn)
		if !ok {
			return fmt.Errorf("find the client host's namespace: a %T has no socket", conn)
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return fmt.Errorf("find the client host's namespace: %w", err)
		}
		ns := -1
		cerr := raw.Control(func(fd uintptr) { ns, err = unix.IoctlRetInt(int(fd), unix.SIOCGSKNS) })
		if err = errors.Join(cerr, err); err != nil {
			return fmt.Errorf("find the client host's namespace (SIOCGSKNS): %w", err)
		}
		defer unix.Close(ns)
		return compose.InNetNS(fmt.Sprintf("/proc/self/fd/%d", ns), cmd.Start)
	}
}
