// Command isrlab is a chaos-testing and fault-injection lab for Kafka-style
// replicated logs. Every subcommand is a thin shell over a package.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// Exit codes follow Jepsen's: a verdict maps to 0/1/2, argument errors to
// 254 and everything else to 255.
const (
	exitValid    = 0
	exitInvalid  = 1
	exitUnknown  = 2
	exitBadArgs  = 254
	exitInternal = 255
)

// exitError carries a specific exit code out of a subcommand.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// withCode wraps err so that main exits with code.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// usageError marks err as a bad-arguments error (exit 254).
func usageError(format string, args ...any) error {
	return withCode(exitBadArgs, fmt.Errorf(format, args...))
}

var rootCmd = &cobra.Command{
	Use:   "isrlab",
	Short: "Chaos-testing and fault-injection lab for Kafka-style replicated logs",
	Long: `isrlab starts a cluster of brokers and coordinators, drives real Kafka
clients against it, injects faults, records every client operation and checks
the history for lost, duplicated, reordered or phantom messages.

It ships its own Kafka-wire-compatible replicated broker (isrlab broker) with an
embedded-etcd coordinator (isrlab coordinator) as the system under test.`,
	SilenceUsage:  true,
	SilenceErrors: true,
}

func init() {
	rootCmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return withCode(exitBadArgs, fmt.Errorf("%w\nRun '%s --help' for usage.", err, c.CommandPath()))
	})
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	rootCmd.SetArgs(args)
	err := rootCmd.Execute()
	if err == nil {
		return exitValid
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(rootCmd.ErrOrStderr(), "isrlab:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(rootCmd.ErrOrStderr(), "isrlab:", err)
	// cobra reports unknown commands and argument-count errors as plain errors.
	if isCobraUsage(err) {
		return exitBadArgs
	}
	return exitInternal
}
