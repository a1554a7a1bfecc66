package cleaner_test

import (
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/engine/fakeclock"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// On S3 a renewal that writes the same bytes keeps the lease's ETag: a
// holder whose state has not moved (an idle volume) renews with the body it
// wrote last, and a contender that waits for the ETag to stay unchanged for
// the TTL took the lease from the live holder, before the lease's nonce
// ("round 2: b took a lease renewed every 30s (TTL 1m0s)" on both stores).
func TestLeaseRenewedSameStateOnS3(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   func(t *testing.T) staging.Store
	}{
		{"versitygw", func(t *testing.T) staging.Store { return s3test.NewStore(t) }},
		{"memory with S3's ETags", func(*testing.T) staging.Store { return mem.NewS3ETags() }},
	} {
		t.Run(tc.name, func(t *testing.T) { testLeaseRenewedSameState(t, tc.st(t)) })
	}
}

func testLeaseRenewedSameState(t *testing.T, st staging.Store) {
	clk := fakeclock.New()
	const ttl = time.Minute
	a := cleaner.NewLease(st, "", ttl, clk.Now)
	b := cleaner.NewLease(st, "", ttl, clk.Now)
	if !acquire(t, a) {
		t.Fatal("a did not take a free lease")
	}
	for i := range 5 {
		if acquire(t, b) {
			t.Fatalf("round %d: b took a lease renewed every %v (TTL %v)", i, ttl/2, ttl)
		}
		clk.Advance(ttl / 2)
		if !acquire(t, a) {
			t.Fatalf("round %d: a lost a lease it renewed", i)
		}
	}
}
