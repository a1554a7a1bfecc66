package segment

import (
	"fmt"
	"strconv"
	"strings"
)

// Object names. The key of an object under its file's prefix is
// "<cno>.<part>": cno in decimal zero-padded to cnoDigits digits (wider when it
// does not fit) so that keys sort by checkpoint, part in decimal without
// padding: "0000000042.3". An unsuffixed "<cno>" is part 0 of a checkpoint
// written before parts existed; it is never tail first. These rules are part
// of the format.
const cnoDigits = 10

// String is the key suffix of n: "0000000042.3".
func (n ObjectName) String() string {
	return fmt.Sprintf("%0*d.%d", cnoDigits, n.Cno, n.Part)
}

// ParseObjectName parses the last element of an object key. It accepts
// exactly the names String produces and unsuffixed "<cno>" (part 0,
// suffixed=false). Anything else, including cno 0, is an error wrapping
// ErrBadName.
func ParseObjectName(s string) (name ObjectName, suffixed bool, err error) {
	cnoText, partText, suffixed := strings.Cut(s, ".")
	cno, ok := parseCno(cnoText)
	if !ok {
		return ObjectName{}, false, fmt.Errorf("parse object name %q: %w: checkpoint number must be at least %d decimal digits, zero-padded to %d, and not 0",
			s, ErrBadName, cnoDigits, cnoDigits)
	}
	if !suffixed {
		return ObjectName{Cno: cno}, false, nil
	}
	part, ok := parsePart(partText)
	if !ok {
		return ObjectName{}, false, fmt.Errorf("parse object name %q: %w: part must be a decimal uint32 without leading zeros", s, ErrBadName)
	}
	return ObjectName{Cno: cno, Part: part}, true, nil
}

// IsObjectName reports whether s parses as an object name.
func IsObjectName(s string) bool {
	_, _, err := ParseObjectName(s)
	return err == nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func parseCno(s string) (uint64, bool) {
	if len(s) < cnoDigits || !isDigits(s) {
		return 0, false
	}
	// Wider than the padding only when the number needs it: one spelling per
	// number, so names compare equal exactly when they are equal.
	if len(s) > cnoDigits && s[0] == '0' {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, false
	}
	return v, true
}

func parsePart(s string) (uint32, bool) {
	if !isDigits(s) || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(v), true
}
