package main

import (
	"os"
	"strings"
	"testing"
)

// TestMountHelpPointsToTuning: mount --help names the tuning guide, and the
// guide is there.
func TestMountHelpPointsToTuning(t *testing.T) {
	const guide = "docs/tuning.md"
	_, _, out, _ := runStub([]string{"ckptfs", "mount", "--help"}, 0)
	if !strings.Contains(out, guide) {
		t.Errorf("mount --help does not point to %s", guide)
	}
	if _, err := os.Stat("../../" + guide); err != nil {
		t.Errorf("the guide mount --help names: %v", err)
	}
}
