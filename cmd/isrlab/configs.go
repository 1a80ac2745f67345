package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/broker/security"
	"github.com/isrlab/isrlab/kafkaconfig"
)

func init() { rootCmd.AddCommand(newConfigsCmd()) }

// scramChange is one SCRAM-SHA-*=[iterations=N,password=P] entry of
// --add-config.
type scramChange struct {
	mechanism  string
	iterations int
	password   string
}

// parseScramConfigs reads kafka-configs.sh's user config syntax:
// SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret].
// Errors never quote a password.
func parseScramConfigs(s string) ([]scramChange, error) {
	var out []scramChange
	for rest := strings.TrimSpace(s); rest != ""; {
		mech, after, ok := strings.Cut(rest, "=")
		mech = strings.TrimSpace(mech)
		if !ok || !strings.HasPrefix(after, "[") {
			return nil, fmt.Errorf("expected SCRAM-SHA-256=[iterations=N,password=...] or SCRAM-SHA-512=[...], at %q", mech)
		}
		end := strings.Index(after, "]")
		if end < 0 {
			return nil, fmt.Errorf("%s: no closing ]", mech)
		}
		if mech != security.ScramSHA256 && mech != security.ScramSHA512 {
			return nil, fmt.Errorf("%s is not a SCRAM mechanism (SCRAM-SHA-256, SCRAM-SHA-512)", mech)
		}
		c := scramChange{mechanism: mech, iterations: security.MinScramIterations}
		for _, kv := range strings.Split(after[1:end], ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch strings.TrimSpace(k) {
			case "iterations":
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil {
					return nil, fmt.Errorf("%s: iterations is not a number", mech)
				}
				c.iterations = n
			case "password":
				c.password = v
			default:
				// Not quoted: it may be the rest of a password with a comma.
				return nil, fmt.Errorf("%s: a field other than iterations and password (a password cannot hold a comma)", mech)
			}
		}
		if c.password == "" {
			return nil, fmt.Errorf("%s: no password", mech)
		}
		if c.iterations < security.MinScramIterations || c.iterations > security.MaxScramIterations {
			return nil, fmt.Errorf("%s: iterations must be between %d and %d", mech, security.MinScramIterations, security.MaxScramIterations)
		}
		out = append(out, c)
		rest = strings.TrimLeft(strings.TrimSpace(after[end+1:]), ",")
	}
	return out, nil
}

// readAddConfigFile reads --add-config-file: a properties file whose
// entries are SCRAM-SHA-*=[...] lines.
func readAddConfigFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	props, err := kafkaconfig.ParseProperties(f)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, p := range props {
		parts = append(parts, p.Key+"="+p.Value)
	}
	return strings.Join(parts, ","), nil
}

func newConfigsCmd() *cobra.Command {
	var (
		af                 adminFlags
		coordinator        string
		describe, alter    bool
		entityType, name   string
		addConfig, addFile string
		deleteConfig       []string
	)
	cmd := &cobra.Command{
		Use:   "configs (--describe | --alter) --entity-type users [--entity-name USER]",
		Short: "Describe and alter users' SCRAM credentials (like kafka-configs.sh)",
		Long: `Manage SCRAM credentials the way kafka-configs.sh does, through
DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) on any
cluster that serves them, or with --coordinator directly in an isrlab
coordinator (as kafka-configs.sh --zookeeper did), which is how the
brokers' own inter-broker user is created before they start.

Passwords are read from --add-config or, to keep them off the command line
and out of shell history, from --add-config-file; they are never printed.`,
		Example: `  isrlab configs --bootstrap-server 127.0.0.1:9092 --describe --entity-type users
  isrlab configs --bootstrap-server 127.0.0.1:9092 --alter --entity-type users --entity-name alice --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
  isrlab configs --bootstrap-server 10.0.0.3:9093 --command-config admin.properties --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-256
  isrlab configs --coordinator http://10.0.0.2:2379 --alter --entity-type users --entity-name admin --add-config-file admin-scram.properties`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if entityType != "users" {
				return usageError("--entity-type users is the only entity type (topic configs: isrlab topics alter-config)")
			}
			if describe == alter {
				return usageError("give exactly one of --describe and --alter")
			}
			if (af.bootstrap == "") == (coordinator == "") {
				return usageError("give exactly one of --bootstrap-server and --coordinator")
			}
			if describe {
				if coordinator != "" {
					return usageError("--describe needs --bootstrap-server")
				}
				return af.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
					return describeUsers(ctx, cmd.OutOrStdout(), adm, name)
				})
			}
			if name == "" {
				return usageError("--alter needs --entity-name")
			}
			spec := addConfig
			if addFile != "" {
				if spec != "" {
					return usageError("give one of --add-config and --add-config-file")
				}
				s, err := readAddConfigFile(addFile)
				if err != nil {
					return usageError("--add-config-file: %v", err)
				}
				spec = s
			}
			adds, err := parseScramConfigs(spec)
			if err != nil {
				return usageError("--add-config: %v", err)
			}
			for _, d := range deleteConfig {
				if d != security.ScramSHA256 && d != security.ScramSHA512 {
					return usageError("--delete-config %q: expected SCRAM-SHA-256 or SCRAM-SHA-512", d)
				}
			}
			if len(adds) == 0 && len(deleteConfig) == 0 {
				return usageError("--alter needs --add-config, --add-config-file or --delete-config")
			}
			if coordinator != "" {
				err = alterUsersInCoordinator(cmd.Context(), strings.Split(coordinator, ","), af.timeout, name, adds, deleteConfig)
			} else {
				err = af.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
					return alterUsers(ctx, adm, name, adds, deleteConfig)
				})
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Completed updating config for user %s.\n", name)
			return nil
		},
	}
	af.register(cmd)
	f := cmd.Flags()
	f.StringVar(&coordinator, "coordinator", "", "comma-separated coordinator client URLs: write to the coordinator directly")
	f.BoolVar(&describe, "describe", false, "list users' SCRAM credentials (mechanisms and iterations)")
	f.BoolVar(&alter, "alter", false, "add or delete a user's SCRAM credentials")
	f.StringVar(&entityType, "entity-type", "", "users")
	f.StringVar(&name, "entity-name", "", "the user")
	f.StringVar(&addConfig, "add-config", "", "SCRAM-SHA-256=[iterations=N,password=P],SCRAM-SHA-512=[...]")
	f.StringVar(&addFile, "add-config-file", "", "properties file of SCRAM-SHA-*=[...] entries")
	f.StringArrayVar(&deleteConfig, "delete-config", nil, "SCRAM-SHA-256 or SCRAM-SHA-512; repeatable")
	return cmd
}

func describeUsers(ctx context.Context, out io.Writer, adm *kadm.Client, name string) error {
	var users []string
	if name != "" {
		users = []string{name}
	}
	res, err := adm.DescribeUserSCRAMs(ctx, users...)
	if err != nil {
		return fmt.Errorf("describe SCRAM credentials: %w", err)
	}
	for _, u := range slices.Sorted(func(yield func(string) bool) {
		for u := range res {
			if !yield(u) {
				return
			}
		}
	}) {
		r := res[u]
		if r.Err != nil {
			return fmt.Errorf("user %s: %w %s", u, r.Err, r.ErrMessage)
		}
		var parts []string
		for _, ci := range r.CredInfos {
			parts = append(parts, fmt.Sprintf("%s=iterations=%d", ci.Mechanism, ci.Iterations))
		}
		fmt.Fprintf(out, "SCRAM credential configs for user-principal '%s' are %s\n", u, strings.Join(parts, ", "))
	}
	return nil
}

func alterUsers(ctx context.Context, adm *kadm.Client, name string, adds []scramChange, deletes []string) error {
	mech := map[string]kadm.ScramMechanism{security.ScramSHA256: kadm.ScramSha256, security.ScramSHA512: kadm.ScramSha512}
	var up []kadm.UpsertSCRAM
	for _, a := range adds {
		up = append(up, kadm.UpsertSCRAM{User: name, Mechanism: mech[a.mechanism], Iterations: int32(a.iterations), Password: a.password})
	}
	var del []kadm.DeleteSCRAM
	for _, d := range deletes {
		del = append(del, kadm.DeleteSCRAM{User: name, Mechanism: mech[d]})
	}
	res, err := adm.AlterUserSCRAMs(ctx, del, up)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return fmt.Errorf("alter SCRAM credentials of %s: %w", name, err)
	}
	return nil
}

func alterUsersInCoordinator(ctx context.Context, endpoints []string, timeout time.Duration, name string, adds []scramChange, deletes []string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	set := map[string]string{}
	for _, a := range adds {
		c, err := security.NewScramCredential(a.mechanism, a.password, a.iterations)
		if err != nil {
			return err
		}
		set[a.mechanism] = c.String()
	}
	// Coordinators may still be starting: retry until the timeout.
	for {
		err := func() error {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			co, err := coord.Dial(cctx, endpoints)
			if err != nil {
				return err
			}
			defer co.Close()
			return co.AlterScramCredentials(cctx, name, set, deletes)
		}()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("alter SCRAM credentials of %s in coordinator %s: %w", name, strings.Join(endpoints, ","), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
