package compose

import (
	"context"
	"fmt"
	"net"
	"runtime"

	"github.com/vishvananda/netns"
)

// DialFunc dials like net.Dialer.DialContext; kgo.Dialer and
// http.Transport.DialContext take it as is.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// InNetNS runs fn on a locked OS thread that has joined the network namespace
// named by path (a bind mount or /proc/PID/ns/net). Sockets created and
// processes started by fn live in that namespace. If the thread cannot return
// to its namespace it stays locked, so the runtime discards it.
func InNetNS(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		origin, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer origin.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := netns.Set(origin); err != nil {
			// Leave the thread locked: it dies with this goroutine.
			errc <- fmt.Errorf("leave netns %s: %w", path, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// NetNSDialer returns a DialFunc whose sockets are created inside the network
// namespace at path. Addresses must be IP literals: name resolution would run
// on other threads, outside the namespace.
func NetNSDialer(path string) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		// The socket is created on the locked thread, so it belongs to the
		// namespace; connecting and I/O may then run anywhere.
		err := InNetNS(path, func() error {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			conn = c
			return err
		})
		if err != nil {
			return nil, err
		}
		return conn, nil
	}
}
