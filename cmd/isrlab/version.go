package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit are stamped at build time (make build, make release):
//
//	go build -ldflags "-X main.version=v0.3.0 -X main.commit=$(git rev-parse HEAD)"
//
// Unstamped, the build information Go records says what it can: the
// module version `go install ...@VERSION` fetched, and the VCS revision
// of a build inside a checkout.
var version, commit string

func init() { rootCmd.AddCommand(newVersionCmd()) }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print isrlab's version and commit",
		Long: `version prints the version and commit isrlab was built from, the Go
version and the platform. A release binary (make release) and make build
are stamped with both; a binary from 'go install
github.com/isrlab/isrlab/cmd/isrlab@VERSION' reports the module version it
was built from, and one built in a checkout the checkout's commit.`,
		Example: `  isrlab version`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi, _ := debug.ReadBuildInfo()
			v, c := versionOf(version, commit, bi)
			fmt.Fprintf(cmd.OutOrStdout(), "isrlab %s (commit %s, %s, %s/%s)\n", v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// versionOf is the version and commit to print: the stamped ones, else
// what the build information has, else "devel" and "unknown".
func versionOf(stampedVersion, stampedCommit string, bi *debug.BuildInfo) (v, c string) {
	v, c = stampedVersion, stampedCommit
	if bi != nil {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		if c == "" {
			var rev string
			modified := false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			if rev != "" && modified {
				rev += "-dirty"
			}
			c = rev
		}
	}
	if v == "" {
		v = "devel"
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
}
