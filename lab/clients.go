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
	"github.com/isrlab/isrlab/workloads"
	"github.com/isrlab/isrlab/workloads/clients"
)

// newClient returns the driver of the workload's client (nil for
// franz-go), dialing as opts do and starting an exec driver where the
// lab's clients dial from.
func newClient(w Workload, runID string, sasl *clients.SASL, seeds []string, opts []kgo.Opt) (workloads.Client, error) {
	if w.ClientSpec.Name() == clients.FranzGo {
		return nil, nil
	}
	dial, err := workloads.DialOf(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...))
	if err != nil {
		return nil, err
	}
	return clients.New(w.ClientSpec, w.Config, clients.Env{RunID: runID, Seeds: seeds, Dial: dial, SASL: sasl, Start: startWhereDialed(dial, seeds)})
}

// clientSASL is how the in-process drivers authenticate to c: nil for a
// plaintext cluster (the dialer of c.KafkaOpts does the TLS handshake).
func clientSASL(c *compose.Cluster) (*clients.SASL, error) {
	if c.Security == nil {
		return nil, nil
	}
	cs := c.Security.Client()
	if !cs.SASL() {
		return nil, nil
	}
	user, pw, err := cs.Credentials()
	if err != nil {
		return nil, err
	}
	return &clients.SASL{Mechanism: cs.Mechanism, User: user, Password: pw}, nil
}

// startWhereDialed returns a function that starts a command in the network
// namespace of the connections dial makes (the client host's, for a
// cluster the lab laid out), so that an exec driver reaches the brokers
// as the lab's own clients do and a fault that cuts the client host cuts
// it too. The namespace is the one of a connection to a seed broker
// (SIOCGSKNS).
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
