package ssh

import (
	"fmt"
	"io"
	"strings"

	"github.com/isrlab/isrlab/compose"
)

// Plan writes, for a person to read before a run, everything the backend
// will touch on the hosts of t (laid out by Topology from c): where it
// connects and how it authenticates, the commands it will run on each
// node, which processes it may signal, start and stop, and where faults
// put their rules. It connects to nothing.
func (c *Config) Plan(w io.Writer, t compose.Topology) error {
	if err := c.Validate(); err != nil {
		return err
	}
	names := c.Names()
	hosts, _ := hostsOf(c, names, nil)
	a := newAuth(c)
	fmt.Fprintf(w, "ssh cluster: %d nodes, run %s\n", len(c.Nodes), t.RunID)
	switch {
	case c.InsecureIgnoreHostKey:
		fmt.Fprintln(w, "  HOST KEYS ARE NOT CHECKED (insecure_ignore_host_key: true)")
	default:
		fmt.Fprintf(w, "  host keys checked against %s\n", a.knownHosts)
	}
	if c.Sudo {
		fmt.Fprintln(w, "  every command below runs under sudo -n")
	}
	fmt.Fprintf(w, "  clients connect to bootstrap %s", strings.Join(t.Bootstrap(), ","))
	if cl := t.Role(compose.RoleClient); len(cl) > 0 {
		fmt.Fprintf(w, " from %s (tunnelled through its SSH connection)\n", cl[0].Name)
	} else {
		fmt.Fprintln(w, " from this machine")
	}
	if c.Client != nil {
		fmt.Fprintf(w, "  clients connect with %s (the file's client: config)\n", c.Client.Summary())
	} else {
		fmt.Fprintln(w, "  clients connect with PLAINTEXT (no client config)")
	}
	for i, n := range c.Nodes {
		h := hosts[i]
		spec := t.Nodes[i]
		fmt.Fprintf(w, "\n  %s  %s %s at %s: ssh %s@%s", names[i], n.Role, idText(spec), spec.Addr, h.User, h.Addr)
		switch {
		case a.useAgent:
			fmt.Fprintln(w, " (agent)")
		case len(h.keys) > 0:
			fmt.Fprintf(w, " (key %s)\n", strings.Join(h.keys, ", "))
		default:
			fmt.Fprintln(w, " (NO KEY FOUND)")
		}
		switch {
		case n.Systemd != "":
			fmt.Fprintf(w, "    process: systemd unit %s (main pid from systemctl show)\n", n.Systemd)
			fmt.Fprintf(w, "    starts with: systemctl start %s   stops with: systemctl stop %s\n", n.Systemd, n.Systemd)
		case len(n.Start) > 0:
			if len(n.Status) > 0 {
				fmt.Fprintf(w, "    process: the pid %s prints\n", Quote(n.Status))
			} else {
				fmt.Fprintf(w, "    process: pid in %s\n", n.PIDFile)
			}
			if n.Daemon {
				fmt.Fprintf(w, "    starts with: %s (it backgrounds itself)\n", Quote(n.Start))
			} else {
				pf := ""
				if n.PIDFile != "" {
					pf = ", pid written to " + n.PIDFile
				}
				fmt.Fprintf(w, "    starts with: %s (in the background, output appended to %s%s)\n", Quote(n.Start), n.logFile(), pf)
			}
			if len(n.Stop) > 0 {
				fmt.Fprintf(w, "    stops with: %s, SIGKILL after the grace period\n", Quote(n.Stop))
			} else {
				fmt.Fprintln(w, "    stops with: SIGTERM, SIGKILL after the grace period")
			}
		default:
			fmt.Fprintln(w, "    process: not controlled by the lab (no systemd unit, no start command)")
		}
		if n.Managed() {
			fmt.Fprintln(w, "    up: started if it is not running (and stopped again at the end); left running if it is")
			fmt.Fprintln(w, "    faults may send it SIGKILL, SIGTERM, SIGSTOP and SIGCONT and start it again")
		}
		switch {
		case n.Faultfs != nil:
			fmt.Fprintf(w, "    data dir %s: a faultfs mount; the lab touches no file in it (only disk faults, below, and setup/teardown steps could)\n", n.DataDir)
		case n.DataDir != "":
			fmt.Fprintf(w, "    data dir %s: not touched (only setup/teardown steps could)\n", n.DataDir)
		}
		if n.Faultfs != nil {
			fmt.Fprintf(w, "    disk faults (slow-disk, disk-error, disk-hang, power-loss): the faultfs daemon behind %s, sent one request each on standard input to: %s\n",
				n.DataDir, Quote(n.Faultfs.ctl()))
			fmt.Fprintln(w, "      healed on heal, at the end and by isrlab clean --backend ssh (faultfs heal); a power loss kills the process first, then drops the disk's unsynced writes")
		} else if n.Role == RoleBroker {
			fmt.Fprintln(w, "    disk faults: none (no faultfs under its data dir); power-loss is a kill")
		}
		if f := n.logFile(); f != "" {
			fmt.Fprintf(w, "    log %s: its last %d MiB copied to %s/%s/\n", f, logTailBytes>>20, t.RunDir, names[i])
		}
		fw := "nftables table inet isrlab-" + t.RunID + "-<fault>"
		if c.Firewall == "iptables" {
			fw = "iptables chains isrlab-" + t.RunID + "-<fault>-in/-out jumped to from INPUT/OUTPUT"
		} else {
			fw += " (iptables chains of that name where nft is missing)"
		}
		fmt.Fprintf(w, "    partitions, loss: %s; SSH port %d always let through\n", fw, h.Port)
		iface := n.Iface
		if iface == "" {
			iface = "the interface holding " + spec.Addr.String()
		}
		fmt.Fprintf(w, "    slow-net: tc root qdisc handle 1517: on %s (netem, or tbf for a rate alone)\n", iface)
		if n.Clock {
			fmt.Fprintf(w, "    clock-skew: SETS THE SYSTEM CLOCK with date (marker /tmp/isrlab-%s-<fault>-%s.clock until healed)\n", t.RunID, names[i])
		}
	}
	for _, s := range []struct {
		what  string
		steps []Step
	}{{"setup (before the nodes start)", c.Setup}, {"teardown (after they stop)", c.Teardown}} {
		if len(s.steps) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n  %s:\n", s.what)
		for _, st := range s.steps {
			fmt.Fprintf(w, "    on %s: %s\n", st.On, Quote(st.Run))
		}
	}
	fmt.Fprintln(w, "\n  nothing else is installed, changed or deleted on the hosts")
	return nil
}

func idText(n compose.NodeSpec) string {
	if n.Role != compose.RoleBroker {
		return ""
	}
	if n.ID == 0 {
		return "(id from metadata)"
	}
	return fmt.Sprintf("id %d", n.ID)
}
