package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/isrlab/isrlab/compose"
)

// envRootless marks a process re-executed by ReexecInUserNS.
const envRootless = "ISRLAB_ROOTLESS"

// InUserNS reports whether this process runs in a user namespace other than
// the initial one, i.e. as the "root" of a rootless re-execution.
func InUserNS() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	// The initial namespace maps the whole range: "0 0 4294967295".
	return !(len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295")
}

// NeedUserNS reports whether this process must re-execute itself in a user
// namespace before it can create network namespaces.
func NeedUserNS() bool { return os.Geteuid() != 0 && !InUserNS() }

// ReexecInUserNS runs exe with args inside new user, network and mount
// namespaces in which the caller is root (like `unshare --user
// --map-root-user --net --mount`), with the caller's state directory, and
// returns its exit code. Stdio is shared; SIGINT and SIGTERM reach the child
// through the terminal or are forwarded.
func ReexecInUserNS(ctx context.Context, exe string, args []string) (int, error) {
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "ISRLAB_STATE_DIR="+compose.StateDir(), envRootless+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
	// SIGTERM, not SIGKILL, so that the child tears its cluster down.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	return runForCode(cmd)
}

// EnterUserNS runs exe with args inside the user, mount and network
// namespaces of holder, a process of a rootless run, through nsenter(1), so
// that another isrlab process can reach the namespaces that run created (and
// return to a namespace it may enter).
func EnterUserNS(ctx context.Context, holder int, exe string, args []string) (int, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return 0, fmt.Errorf("rootless cluster: need nsenter (util-linux): %w", err)
	}
	argv := append([]string{"--target", strconv.Itoa(holder), "--user", "--mount", "--net", "--preserve-credentials", "--", exe}, args...)
	cmd := exec.CommandContext(ctx, nsenter, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "ISRLAB_STATE_DIR="+compose.StateDir(), envRootless+"=1")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	return runForCode(cmd)
}

func runForCode(cmd *exec.Cmd) (int, error) {
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("re-execute in user namespace: %w", err)
	}
	return 0, nil
}

// Holder returns a live process of a rootless run whose namespaces hold it,
// or 0 if none is left.
func Holder(st *compose.State) int {
	if compose.Alive(st.Holder, st.HolderStart) {
		return st.Holder
	}
	for _, n := range st.Nodes {
		if compose.Alive(n.PID, n.PIDStart) {
			return n.PID
		}
	}
	// A faultfs daemon holds the mount namespace its mount lives in.
	for _, n := range st.Nodes {
		if compose.Alive(n.DiskPID, n.DiskPIDStart) {
			return n.DiskPID
		}
	}
	return 0
}
