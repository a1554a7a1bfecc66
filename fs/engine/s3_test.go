package engine

import (
	"testing"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

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
			runModel(t, s3test.NewStore(t), c.p, c.ops, 200_000, 40_000)
		})
	}
}
