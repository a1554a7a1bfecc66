package main

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// TestSdNotify: with $NOTIFY_SOCKET set, as systemd sets it for a
// Type=notify service, the states reach the socket; without it nothing is
// sent and nothing fails.
func TestSdNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	for _, state := range []string{daemon.SdNotifyReady, daemon.SdNotifyStopping} {
		sdNotify(zap.NewNop(), state)
		buf := make([]byte, 64)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != state {
			t.Errorf("sent %q: read %q, %v", state, buf[:n], err)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "")
	sdNotify(zap.NewNop(), daemon.SdNotifyReady) // no systemd: a no-op
}

// TestAbortConnectionUnknown: a connection whose number is unknown is not
// guessed at.
func TestAbortConnectionUnknown(t *testing.T) {
	if err := abortConnection(""); err == nil {
		t.Error("abortConnection(\"\") succeeded")
	}
}
