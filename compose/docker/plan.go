package docker

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/isrlab/isrlab/compose"
)

// Plan writes what Up would create for t, for a person to read first: the
// network, and per node its sandbox and process containers with their
// images, commands, environments and bind mounts. It contacts no Docker
// daemon and refuses what Up would refuse before it creates anything
// (except that the images' presence is checked by Up only).
func (b *Backend) Plan(w io.Writer, t compose.Topology) error {
	o := b.defaults()
	specs, err := o.planSpecs(t)
	if err != nil {
		return err
	}
	t, _ = o.check(t)
	fmt.Fprintf(w, "docker cluster %s: run %s, system %s\n", t.Name, t.RunID, o.System)
	fmt.Fprintf(w, "  network %s: bridge on %s, gateway %s\n", NetworkName(t.RunID), t.Subnet, Gateway(t.Subnet))
	fmt.Fprintf(w, "  lab image %s: imported from this isrlab binary at up (never pulled)", labImageRef)
	if o.System == SystemKafka {
		fmt.Fprintf(w, ", for the sandboxes; brokers run %s, which must already be loaded (docker load): isrlab never pulls", o.KafkaImage)
	}
	fmt.Fprintln(w)
	if o.System == SystemKafka {
		fmt.Fprintln(w, "  KRaft in combined mode: every broker is also a controller; no coordinators")
	}
	if s := t.Security; s != nil {
		fmt.Fprintf(w, "  %s; the brokers' containers mount %s and the passwords' %s read-only\n", s.Summary(), s.TLSDir, s.SecretsDir)
	}
	for _, s := range specs {
		fmt.Fprintf(w, "\n  %s  %s %s: image %s", s.Node, s.Kind, s.Name, s.Image)
		if s.IP.IsValid() {
			fmt.Fprintf(w, ", address %s, hostname %s", s.IP, s.Hostname)
		}
		if s.JoinOf != "" {
			fmt.Fprintf(w, ", in the network namespace of %s", s.JoinOf)
		}
		fmt.Fprintln(w)
		if len(s.Cmd) > 0 {
			fmt.Fprintf(w, "    command: %s\n", strings.Join(s.Cmd, " "))
		}
		for _, m := range s.Binds {
			fmt.Fprintf(w, "    bind: %s\n", m)
		}
		for _, e := range s.Env {
			fmt.Fprintf(w, "    env: %s\n", e)
		}
	}
	fmt.Fprintf(w, "\n  every container and the network carry the label %s=%s; cluster down (or isrlab clean) removes them\n", LabelRun, t.RunID)
	return nil
}

// labImageRef stands for the lab image in a plan: its tag is the binary's
// content hash, known once it is imported.
const labImageRef = "isrlab-lab:<hash of the binary>"

// check refuses what Up refuses before it touches Docker, and returns the
// topology Up lays out (without coordinators for the kafka system).
func (o Backend) check(t compose.Topology) (compose.Topology, error) {
	switch o.System {
	case SystemIsrlab, SystemKafka:
	default:
		return t, fmt.Errorf("%w: system %q: use %s or %s", compose.ErrBadTopology, o.System, SystemIsrlab, SystemKafka)
	}
	if o.System == SystemKafka {
		t = withoutCoordinators(t)
		if len(t.Role(compose.RoleBroker)) == 0 {
			return t, fmt.Errorf("%w: system kafka needs at least one broker", compose.ErrBadTopology)
		}
	}
	if gw := Gateway(t.Subnet); containsAddr(t, gw) {
		return t, fmt.Errorf("%w: node address %s is Docker's gateway; use a larger subnet", compose.ErrBadTopology, gw)
	}
	if len(t.Proxies()) > 0 {
		return t, fmt.Errorf("cluster %s: Kafka proxies (kind: kafka faults): %w on the docker backend yet (use the netns backend)", t.Name, errors.ErrUnsupported)
	}
	if t.Security != nil && o.System != SystemIsrlab {
		return t, fmt.Errorf("cluster %s: a secured cluster: %w for system %s: the lab lays out TLS and SASL for isrlab brokers only (KRaft's controllers would speak plaintext to the brokers)", t.Name, errors.ErrUnsupported, o.System)
	}
	if len(t.Disks()) > 0 && o.System != SystemIsrlab {
		return t, fmt.Errorf("cluster %s: faultfs disks: %w for system %s (isrlab brokers only)", t.Name, errors.ErrUnsupported, o.System)
	}
	return t, nil
}

// planSpecs lays out the containers of a plan, with the lab image's
// placeholder.
func (o Backend) planSpecs(t compose.Topology) ([]ContainerSpec, error) {
	t, err := o.check(t)
	if err != nil {
		return nil, err
	}
	idle := append([]string{BinaryPath}, o.Idle...)
	if o.System == SystemKafka {
		return KafkaSpecs(t, o.KafkaImage, labImageRef, idle, o.IdleEnv, o.KafkaConf), nil
	}
	return IsrlabSpecs(t, labImageRef, idle, o.IdleEnv), nil
}
