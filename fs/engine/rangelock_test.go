package engine

import "testing"

// Who waits for whom: a held range conflicts with an overlapping one when
// either is exclusive, and so does an older request still waiting, so that
// a flush waiting to share the blocks it publishes is not overtaken by
// newer writes, and reads are not held back by a shared request, nor by a
// write that waits for a flush.
func TestRangeLockConflicts(t *testing.T) {
	shared := func(lo, hi, id uint64) blockRange { return blockRange{lo: lo, hi: hi, id: id} }
	excl := func(lo, hi, id uint64) blockRange { return blockRange{lo: lo, hi: hi, excl: true, id: id} }
	flush := func(lo, hi, id uint64) blockRange { return blockRange{lo: lo, hi: hi, flush: true, id: id} }
	cases := []struct {
		name          string
		held, waiting []blockRange
		me            blockRange
		want          bool
	}{
		{"held shared, me shared", []blockRange{shared(0, 10, 1)}, nil, shared(5, 6, 2), false},
		{"held shared, me exclusive", []blockRange{shared(0, 10, 1)}, nil, excl(5, 6, 2), true},
		{"held exclusive, me shared", []blockRange{excl(0, 10, 1)}, nil, shared(5, 6, 2), true},
		{"held exclusive, disjoint", []blockRange{excl(0, 10, 1)}, nil, excl(10, 11, 2), false},
		{"older shared waiting, me exclusive", nil, []blockRange{shared(0, 10, 1)}, excl(5, 6, 2), true},
		{"older shared waiting, me shared", nil, []blockRange{shared(0, 10, 1)}, shared(5, 6, 2), false},
		{"older exclusive waiting, me shared", nil, []blockRange{excl(0, 10, 1)}, shared(5, 6, 2), true},
		{"newer shared waiting, me exclusive", nil, []blockRange{shared(0, 10, 3)}, excl(5, 6, 2), false},
		{"older shared waiting, disjoint", nil, []blockRange{shared(0, 10, 1)}, excl(10, 20, 2), false},
		{"older exclusive waiting for a flush, me shared", []blockRange{flush(0, 10, 1)}, []blockRange{excl(5, 6, 2)}, shared(5, 6, 3), false},
		{"older exclusive waiting for a flush, me exclusive", []blockRange{flush(0, 10, 1)}, []blockRange{excl(5, 6, 2)}, excl(5, 6, 3), true},
		{"older exclusive waiting for a read, me shared", []blockRange{shared(0, 10, 1)}, []blockRange{excl(5, 6, 2)}, shared(5, 6, 3), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := &rangeLock{held: c.held, waiting: c.waiting}
			if got := l.conflicts(c.me); got != c.want {
				t.Errorf("conflicts = %v, want %v", got, c.want)
			}
		})
	}
}
