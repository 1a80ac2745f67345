package faultfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// benchTargets are the directories a benchmark writes to: the plain backing
// filesystem, faultfs with passthrough (the default) and faultfs with every
// operation hooked.
func benchTargets(b *testing.B) map[string]string {
	_, _, pt := mountT(b, true)
	_, _, hooked := mountT(b, false)
	return map[string]string{"plain": b.TempDir(), "faultfs": pt, "faultfs-hooked": hooked}
}

var benchOrder = []string{"plain", "faultfs", "faultfs-hooked"}

// BenchmarkAppend appends size-byte records to one file opened O_APPEND,
// with no fault active and no fsync; the file is truncated every 64 MiB.
func BenchmarkAppend(b *testing.B) {
	targets := benchTargets(b)
	for _, size := range []int{1 << 10, 64 << 10} {
		for _, name := range benchOrder {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, name), func(b *testing.B) {
				fh, err := os.OpenFile(filepath.Join(targets[name], fmt.Sprintf("append-%d", size)), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				defer fh.Close()
				buf := make([]byte, size)
				b.SetBytes(int64(size))
				written := 0
				b.ResetTimer()
				for range b.N {
					if written >= 64<<20 {
						if err := fh.Truncate(0); err != nil {
							b.Fatal(err)
						}
						written = 0
					}
					if _, err := fh.Write(buf); err != nil {
						b.Fatal(err)
					}
					written += size
				}
			})
		}
	}
}

// BenchmarkFsyncHeavy appends 4 KiB and fdatasyncs after every write, like
// a log flushed per message.
func BenchmarkFsyncHeavy(b *testing.B) {
	targets := benchTargets(b)
	for _, name := range benchOrder {
		b.Run(name, func(b *testing.B) {
			fh, err := os.OpenFile(filepath.Join(targets[name], "synced"), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer fh.Close()
			buf := make([]byte, 4<<10)
			b.SetBytes(int64(len(buf)))
			written := 0
			b.ResetTimer()
			for range b.N {
				if written >= 64<<20 {
					if err := fh.Truncate(0); err != nil {
						b.Fatal(err)
					}
					written = 0
				}
				if _, err := fh.Write(buf); err != nil {
					b.Fatal(err)
				}
				if err := fdatasync(fh); err != nil {
					b.Fatal(err)
				}
				written += len(buf)
			}
		})
	}
}

func fdatasync(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = syscall.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	return serr
}

// BenchmarkControl measures a fault's inject plus heal round trip over the
// control socket, per fault kind, as the nemesis sees it.
func BenchmarkControl(b *testing.B) {
	f, _, _ := mountT(b, true)
	sock := filepath.Join(b.TempDir(), "ctl.sock")
	ln, err := Listen(sock)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.Serve(ctx, ln) }()
	b.Cleanup(func() { cancel(); <-served })
	c := NewClient(sock)
	for _, tc := range []struct {
		kind   string
		inject func() error
	}{
		{"latency", func() error { return c.Latency(ctx, OpWrite, "", time.Millisecond, 0) }},
		{"eio", func() error { return c.EIO(ctx, OpFsync, "", 0.5) }},
		{"hang", func() error { return c.Hang(ctx, OpAll, "") }},
		{"crash", func() error { _, err := c.Crash(ctx); return err }},
	} {
		b.Run(tc.kind, func(b *testing.B) {
			for range b.N {
				if err := tc.inject(); err != nil {
					b.Fatal(err)
				}
				if err := c.Heal(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
