package main

import (
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ckptfs/ckptfs/config"
)

// TestMountLoggers: a detached mount says mounted and unmounted at the
// default level (warn) and at info, but not when the user asked for errors
// only; in the foreground those lines follow the level alone. The mount's
// other info lines follow the level everywhere.
func TestMountLoggers(t *testing.T) {
	for _, tc := range []struct {
		level              config.LogLevel
		detached           bool
		wantLife, wantInfo bool
	}{
		{config.LogWarn, true, true, false},
		{config.LogInfo, true, true, true},
		{config.LogDebug, true, true, true},
		{config.LogError, true, false, false},
		{config.LogWarn, false, false, false},
		{config.LogInfo, false, true, true},
		{config.LogError, false, false, false},
	} {
		var b strings.Builder
		log, life := mountLoggers(writerSink(&b), tc.level, tc.detached)
		life.Info("mounted")
		log.Info("an info line")
		log.Error("an error line")
		got := b.String()
		if strings.Contains(got, "mounted") != tc.wantLife || strings.Contains(got, "an info line") != tc.wantInfo ||
			!strings.Contains(got, "an error line") {
			t.Errorf("log=%s detached=%t: %q", tc.level, tc.detached, got)
		}
	}
	log, life := mountLoggers(nil, config.LogWarn, true) // no system log: nothing, no panic
	log.Error("x")
	life.Info("x")
}

// TestJournalCore: an entry reaches the journal with its message, the
// priority of its level, the identifier ckptfs and each field (those of
// With too) as a journal field; below the level nothing is sent.
func TestJournalCore(t *testing.T) {
	type sent struct {
		msg  string
		p    journal.Priority
		vars map[string]string
	}
	var got []sent
	jc := &journalCore{LevelEnabler: zapcore.WarnLevel, enc: zapcore.NewConsoleEncoder(syslogEncoderConfig()),
		send: func(msg string, p journal.Priority, vars map[string]string) error {
			got = append(got, sent{msg, p, vars})
			return nil
		}}
	log := zap.New(jc).Named("ckptfs").With(zap.String("store", "s3://b/v"))
	log.Info("not sent")
	log.Error("flush failed", zap.String("file", "f1"), zap.Int("try-count", 3))
	life := zap.New(jc.withLevel(zapcore.InfoLevel)).Named("ckptfs")
	life.Info("mounted", zap.String("mountpoint", "/mnt"))
	if len(got) != 2 {
		t.Fatalf("sent %d entries, want 2: %+v", len(got), got)
	}
	e := got[0]
	if e.p != journal.PriErr || !strings.Contains(e.msg, "flush failed") || e.vars["SYSLOG_IDENTIFIER"] != "ckptfs" ||
		e.vars["CKPTFS_FILE"] != "f1" || e.vars["CKPTFS_TRY_COUNT"] != "3" || e.vars["CKPTFS_STORE"] != "s3://b/v" {
		t.Errorf("error entry %+v", e)
	}
	if e := got[1]; e.p != journal.PriInfo || e.vars["CKPTFS_MOUNTPOINT"] != "/mnt" {
		t.Errorf("mounted entry %+v", e)
	}
}
