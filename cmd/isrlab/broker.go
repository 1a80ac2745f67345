package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/isrlab/isrlab/broker"
	"github.com/isrlab/isrlab/broker/controller"
	"github.com/isrlab/isrlab/broker/coord"
	"github.com/isrlab/isrlab/kafkaconfig"
)

// controllerFactory builds the controller a clustered broker runs while
// it holds the coordinator's controller election.
func controllerFactory(cfg *kafkaconfig.Config, logger *slog.Logger) broker.ControllerFactory {
	return func(b *broker.Broker, c *coord.Client) broker.Controller {
		return controller.New(controller.Config{
			BrokerID:   b.ID(),
			Coord:      c,
			Broker:     cfg,
			Logger:     logger.With("component", "controller"),
			Registerer: b.MetricsRegisterer(),
			Dial:       b.InterBrokerDial(),
		})
	}
}

func init() { rootCmd.AddCommand(newBrokerCmd()) }

func newBrokerCmd() *cobra.Command {
	var (
		configPath string
		overrides  []string
		logLevel   string
	)
	cmd := &cobra.Command{
		Use:   "broker --config server.properties [--override key=value]...",
		Short: "Run one Kafka-wire-compatible isrlab broker",
		Long: `Run one isrlab broker, the lab's system under test. Its configuration uses
Kafka's server.properties syntax and Kafka's key names and defaults
(broker.id, listeners, log.dirs, log.segment.bytes, log.retention.hours,
num.io.threads, queued.max.requests, message.max.bytes, ...). --override
sets one key after the file is read and may be repeated.

Unknown keys are reported as warnings; an invalid value stops the broker with
an error naming the key and the value. SIGINT or SIGTERM shuts the broker
down cleanly (logs flushed, clean-shutdown marker written); after SIGKILL the
next start recovers the logs from their recovery points.`,
		Example: `  isrlab broker --config server.properties
  isrlab broker --override log.dirs=/tmp/b1 --override listeners=PLAINTEXT://127.0.0.1:9092
  isrlab broker --config server.properties --override metrics.listen=127.0.0.1:9404`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelInfo
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usageError("--log-level %q: %v", logLevel, err)
			}
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			cfg, warns, err := kafkaconfig.Load(configPath, overrides)
			if err != nil {
				var inv *kafkaconfig.InvalidError
				if errors.As(err, &inv) {
					return usageError("%v", err)
				}
				return withCode(exitBadArgs, err)
			}
			for _, w := range warns {
				logger.Warn(w.String())
			}
			b, err := broker.New(cfg, broker.WithLogger(logger), broker.WithController(controllerFactory(cfg, logger)))
			if err != nil {
				var inv *kafkaconfig.InvalidError
				if errors.As(err, &inv) {
					return usageError("%v", err)
				}
				return fmt.Errorf("start broker: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if err := b.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				var inv *kafkaconfig.InvalidError
				if errors.As(err, &inv) {
					return usageError("%v", err)
				}
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "broker configuration file in server.properties syntax")
	cmd.Flags().StringArrayVar(&overrides, "override", nil, "set one configuration key (key=value); repeatable")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	return cmd
}
