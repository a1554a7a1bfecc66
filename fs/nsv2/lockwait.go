package nsv2

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Waits of a change that met a name locked by another mount's change of
// several names not decided yet (ErrLocked): that change decides within a
// round trip or two, or, its mount gone, is aborted by the first reader
// once TxGrace has passed (Resolve). The change is tried again, after
// lockWaitFirst, doubling up to lockWaitMax, until it goes through or its
// ctx ends (the mount's operation deadline); only then does ErrLocked reach
// the caller (the mount answers EBUSY).
const (
	lockWaitFirst = 20 * time.Millisecond
	lockWaitMax   = time.Second
)

// waitLocked runs op until it fails with anything but ErrLocked. An op
// that meets a locked name has changed nothing (a change refused by a lock
// has undone its own locks, lockAll), so trying it again is safe. Each wait
// is drawn at random from its upper half: two changes that take each
// other's names at once (their locks are sent together) and both back off
// then try again apart, rather than meeting again in step.
func waitLocked[T any](ctx context.Context, t *Tree, op func() (T, error)) (T, error) {
	wait := lockWaitFirst
	for {
		v, err := op()
		if !errors.Is(err, ErrLocked) {
			return v, err
		}
		if t.sleep(ctx, wait/2+rand.N(wait/2+1)) != nil {
			return v, err
		}
		wait = min(2*wait, lockWaitMax)
	}
}
