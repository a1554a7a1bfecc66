package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/fs/fusefs"
)

// Bounds of a stop (SIGTERM, SIGINT) of a busy mount: after the lazy
// unmount, how long the programs holding files open get to close them, and
// once the connection is cut, how long the server gets to stop. The flushes
// that follow are bounded by the store's own time-outs (fusefs Close).
const (
	busyGrace = 10 * time.Second
	abortWait = 5 * time.Second
)

// fuseConnections is where the kernel lists FUSE connections (fusectl);
// writing to a connection's abort ends it.
const fuseConnections = "/sys/fs/fuse/connections"

// errStillMounted: a stop could not unmount at all; the mount keeps
// serving.
var errStillMounted = errors.New("still mounted")

// sdNotify tells systemd the mount's state (READY=1, STOPPING=1) when it
// runs the mount as a Type=notify service; elsewhere ($NOTIFY_SOCKET
// unset) it does nothing.
func sdNotify(log *zap.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("systemd notification not sent", zap.String("state", state), zap.Error(err))
	}
}

// fuseConnection is the fusectl folder of the FUSE mount at dir, named by
// the device number of its file system; "" when it cannot be told.
func fuseConnection(dir string) string {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil || unix.Major(st.Dev) != 0 {
		return ""
	}
	return filepath.Join(fuseConnections, strconv.FormatUint(uint64(unix.Minor(st.Dev)), 10))
}

// abortConnection ends the FUSE connection conn (see fuseConnection): the
// programs still using the mount get ENOTCONN, and the server stops. It
// mounts fusectl first when it is not (root only), as systemd does at boot.
func abortConnection(conn string) error {
	if conn == "" {
		return errors.New("abort the FUSE connection: its number is unknown")
	}
	if _, err := os.Stat(conn); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mount("fusectl", fuseConnections, "fusectl", 0, ""); err != nil && !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("abort the FUSE connection: mount fusectl on %s: %w", fuseConnections, err)
		}
	}
	if err := os.WriteFile(filepath.Join(conn, "abort"), []byte("1"), 0); err != nil {
		return fmt.Errorf("abort the FUSE connection: %w", err)
	}
	return nil
}

// stopMount unmounts on SIGTERM or SIGINT, within a bounded time: a plain
// unmount; if the mount is busy, a lazy one, then busyGrace for the files
// still open to be closed, then the connection is cut. Every file is then
// flushed (fusefs Close) and an error names each one that could not be.
// done is closed when the server has stopped. errStillMounted: not even the
// lazy unmount worked, and the mount keeps serving.
func stopMount(fsys *fusefs.FS, dir, conn string, done <-chan struct{}, log *zap.Logger) error {
	err := fsys.Unmount()
	if !errors.Is(err, fusefs.ErrMountBusy) {
		if err != nil {
			<-done
		}
		return err
	}
	log.Warn("mount busy: unmounting lazily; files still open get time to close", zap.String("mountpoint", dir),
		zap.Duration("grace", busyGrace))
	if lerr := fusefs.LazyUnmount(dir); lerr != nil {
		return fmt.Errorf("%w: %w; %w", errStillMounted, err, lerr)
	}
	select {
	case <-done:
		return fsys.Close()
	case <-time.After(busyGrace):
	}
	log.Warn("files still open: ending the FUSE connection", zap.String("mountpoint", dir))
	if aerr := abortConnection(conn); aerr != nil {
		return fmt.Errorf("files still open after %v were not flushed: %w", busyGrace, aerr)
	}
	select {
	case <-done:
	case <-time.After(abortWait):
		return fmt.Errorf("files still open were not flushed: the server did not stop within %v of the connection's end", abortWait)
	}
	return fsys.Close()
}

// serveUntilStopped serves the mount until it is unmounted, by SIGINT or
// SIGTERM (stopMount) or from outside (fusermount3 -u, umount), and returns
// the exit status: 1 when files could not be flushed. SIGHUP calls reopen.
func serveUntilStopped(fsys *fusefs.FS, mountpoint, conn string, log, life *zap.Logger, reopen func(), stderr io.Writer) int {
	sigs := make(chan os.Signal, 2)
	// SIGHUP reopens the log file (logrotate); without this it would
	// end the mount.
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	go func() {
		fsys.Wait()
		close(done)
	}()
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGHUP {
				reopen()
				continue
			}
			life.Info("unmounting", zap.Stringer("signal", s), zap.String("mountpoint", mountpoint))
			sdNotify(log, daemon.SdNotifyStopping)
			if err := stopMount(fsys, mountpoint, conn, done, log); err != nil {
				if errors.Is(err, errStillMounted) {
					log.Error("unmount failed", zap.Error(err))
					fmt.Fprintf(stderr, "ckptfs: %v\n", err)
					sdNotify(log, daemon.SdNotifyReady)
					continue // still mounted: keep serving
				}
				// Unmounted, but files could not be flushed (each is
				// named in the log and the error): exit non-zero.
				log.Error("unmounted; files not flushed", zap.Error(err))
				fmt.Fprintf(stderr, "ckptfs: %v\n", err)
				return 1
			}
			life.Info("unmounted", zap.String("mountpoint", mountpoint))
			return 0
		case <-done:
			// Unmounted from outside (fusermount3 -u, umount).
			sdNotify(log, daemon.SdNotifyStopping)
			life.Info("unmounted", zap.String("mountpoint", mountpoint))
			if err := fsys.Close(); err != nil {
				log.Error("unmounted; files not flushed", zap.Error(err))
				fmt.Fprintf(stderr, "ckptfs: %v\n", err)
				return 1
			}
			return 0
		}
	}
}
