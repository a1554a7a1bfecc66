package segment

import (
	"errors"
	"testing"
)

func TestObjectNameString(t *testing.T) {
	tests := []struct {
		n    ObjectName
		want string
	}{
		{ObjectName{Cno: 42, Part: 3}, "0000000042.3"},
		{ObjectName{Cno: 1}, "0000000001.0"},
		{ObjectName{Cno: 9999999999, Part: 12}, "9999999999.12"},
		{ObjectName{Cno: 10000000000}, "10000000000.0"},
		{ObjectName{Cno: 1<<64 - 1, Part: 1<<32 - 1}, "18446744073709551615.4294967295"},
	}
	for _, tc := range tests {
		if got := tc.n.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.n, got, tc.want)
		}
		got, suffixed, err := ParseObjectName(tc.want)
		if err != nil || !suffixed || got != tc.n {
			t.Errorf("ParseObjectName(%q) = %+v, %v, %v", tc.want, got, suffixed, err)
		}
	}
	// Keys sort by checkpoint.
	if !(ObjectName{Cno: 9}.String() < ObjectName{Cno: 10}.String()) {
		t.Error("names do not sort by cno")
	}
}

func TestParseObjectName(t *testing.T) {
	tests := []struct {
		s        string
		want     ObjectName
		suffixed bool
		ok       bool
	}{
		{"0000000042.3", ObjectName{42, 3}, true, true},
		{"0000000042", ObjectName{42, 0}, false, true},
		{"10000000000", ObjectName{10000000000, 0}, false, true},
		{"0000000001.0", ObjectName{1, 0}, true, true},
		{"0000000000.0", ObjectName{}, false, false},  // cno 0 is no checkpoint
		{"42.3", ObjectName{}, false, false},          // not padded
		{"00000000042.3", ObjectName{}, false, false}, // padded too wide
		{"0000000042.03", ObjectName{}, false, false}, // padded part
		{"0000000042.", ObjectName{}, false, false},
		{"0000000042.3.1", ObjectName{}, false, false},
		{"0000000042.-3", ObjectName{}, false, false},
		{"0000000042.4294967296", ObjectName{}, false, false},
		{"18446744073709551616.0", ObjectName{}, false, false},
		{"+000000042.3", ObjectName{}, false, false},
		{"000000004x.3", ObjectName{}, false, false},
		{"inode", ObjectName{}, false, false},
		{"", ObjectName{}, false, false},
		{".3", ObjectName{}, false, false},
	}
	for _, tc := range tests {
		got, suffixed, err := ParseObjectName(tc.s)
		if tc.ok {
			if err != nil || got != tc.want || suffixed != tc.suffixed {
				t.Errorf("ParseObjectName(%q) = %+v, %v, %v; want %+v, %v", tc.s, got, suffixed, err, tc.want, tc.suffixed)
			}
		} else if !errors.Is(err, ErrBadName) {
			t.Errorf("ParseObjectName(%q) error = %v, want ErrBadName", tc.s, err)
		}
		if IsObjectName(tc.s) != tc.ok {
			t.Errorf("IsObjectName(%q) = %v", tc.s, !tc.ok)
		}
	}
}
