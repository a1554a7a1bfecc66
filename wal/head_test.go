package wal

import "testing"

// The head's mark: MarkHead and HeadApplied agree, no mark is an untracked
// file, and a mark that is no record number is refused.
func TestHeadApplied(t *testing.T) {
	for _, c := range []struct {
		name    string
		meta    map[string]string
		applied uint64
		tracked bool
		bad     bool
	}{
		{"none", map[string]string{"ckptfs-write": "x"}, 0, false, false},
		{"zero", map[string]string{HeadMeta: "0"}, 0, true, false},
		{"some", map[string]string{HeadMeta: "42"}, 42, true, false},
		{"max", map[string]string{HeadMeta: "18446744073709551615"}, 1<<64 - 1, true, false},
		{"not a number", map[string]string{HeadMeta: "4x"}, 0, false, true},
		{"negative", map[string]string{HeadMeta: "-1"}, 0, false, true},
	} {
		applied, tracked, err := HeadApplied(c.meta)
		if (err != nil) != c.bad || applied != c.applied || tracked != c.tracked {
			t.Errorf("%s: HeadApplied = %d, %v, %v; want %d, %v, error %v", c.name, applied, tracked, err, c.applied, c.tracked, c.bad)
		}
	}
	meta := map[string]string{}
	MarkHead(meta, 7)
	if applied, tracked, err := HeadApplied(meta); applied != 7 || !tracked || err != nil {
		t.Errorf("HeadApplied of MarkHead(7) = %d, %v, %v", applied, tracked, err)
	}
}
