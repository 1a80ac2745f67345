//go:build tools

// Package main pins modules that packages under construction import, so that
// `go mod tidy` keeps them in go.mod between changes.
package main

import (
	_ "github.com/IBM/sarama"
	_ "github.com/anishathalye/porcupine"
	_ "github.com/google/nftables"
	_ "github.com/hanwen/go-fuse/v2/fs"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/twmb/franz-go/pkg/kadm"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/client/v3/concurrency"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "golang.org/x/sync/errgroup"
	_ "gopkg.in/yaml.v3"
)
