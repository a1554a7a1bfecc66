package main

import (
	"strings"
	"testing"

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
