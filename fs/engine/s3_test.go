package engine

import (
	"flag"
	"os"
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

func TestMain(m *testing.M) {
	flag.Parse()
	installLockChecks()
	if *lockSurvey {
		// No S3 server is started (newS3Store skips): s3test.Main would
		// exit before the survey is printed.
		code := m.Run()
		survey.print()
		os.Exit(code)
	}
	s3test.Main(m)
}

// newS3Store is s3test.NewStore; it skips t in the survey of store requests
// under File.mu (lockcheck_test.go), which runs without a server.
func newS3Store(t *testing.T) staging.Store {
	if *lockSurvey {
		t.Skip("no S3 server in the lock survey")
	}
	return s3test.NewStore(t)
}

// The randomized model test against a real S3 server on loopback.
func TestModelS3(t *testing.T) {
	ops := modelOps(5000, 600)
	cases := []struct {
		name string
		p    Params
		ops  int
	}{
		{"parted", smallParams(segment.FormatParted), ops},
		{"stream-send-whole", sendWholeParams(), ops},
		// Every change is a PUT of its own here (no concurrency to group):
		// fewer of them.
		{"wal", walParams(segment.FormatStream), ops * 2 / 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runModel(t, newS3Store(t), c.p, c.ops, 200_000, 40_000)
		})
	}
}
