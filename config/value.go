package config

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Classes of problems, for errors.Is on an error of Set, Parse, Validate or
// ParseSize.
var (
	// ErrUnknownOption: no option has that name.
	ErrUnknownOption = errors.New("unknown option")
	// ErrSyntax: the value cannot be read as the option's type (a bad unit,
	// a word that is not a boolean, a missing value).
	ErrSyntax = errors.New("bad syntax")
	// ErrInvalidValue: the value reads but breaks a rule: out of range, or in
	// conflict with another option.
	ErrInvalidValue = errors.New("invalid value")
)

// OptionError is one problem with one option. Err wraps ErrUnknownOption,
// ErrSyntax or ErrInvalidValue.
type OptionError struct {
	Name    string // option name as in -o name=value
	Value   string // the value as given, or the current value for a rule Validate checks
	Allowed string // the option's allowed values, as in Options
	// Suggestion is, for an unknown name, the nearest known one (see
	// Suggest), or "".
	Suggestion string
	Err        error
}

func (e *OptionError) Error() string {
	if errors.Is(e.Err, ErrUnknownOption) {
		if e.Suggestion != "" {
			return fmt.Sprintf("unknown option %q (did you mean %s?)", e.Name, e.Suggestion)
		}
		return fmt.Sprintf("unknown option %q (known: %s)", e.Name, strings.Join(append(names(), storeOwnNames...), ", "))
	}
	if e.Value == "" {
		return fmt.Sprintf("option %s: %v", e.Name, e.Err)
	}
	return fmt.Sprintf("option %s=%s: %v", e.Name, e.Value, e.Err)
}

func (e *OptionError) Unwrap() error { return e.Err }

// problem is an error of one class (ErrSyntax or ErrInvalidValue) whose text is
// only its message, so that OptionError reads as one sentence.
type problem struct {
	class error
	msg   string
}

func (p *problem) Error() string { return p.msg }
func (p *problem) Unwrap() error { return p.class }

func syntaxf(format string, args ...any) error {
	return &problem{class: ErrSyntax, msg: fmt.Sprintf(format, args...)}
}

func invalidf(format string, args ...any) error {
	return &problem{class: ErrInvalidValue, msg: fmt.Sprintf(format, args...)}
}

// ParseSize reads a size in bytes: plain decimal digits, or digits followed by
// K, M or G (or KiB, MiB, GiB; any case), all powers of 1024. "16M" is 16 MiB.
// A fraction, a sign, spaces or a result above the int64 range are ErrSyntax.
func ParseSize(s string) (int64, error) {
	digits, shift := s, uint(0)
	lower := strings.ToLower(s)
	for _, u := range []struct {
		suffix string
		shift  uint
	}{
		{"kib", 10}, {"mib", 20}, {"gib", 30},
		{"k", 10}, {"m", 20}, {"g", 30},
	} {
		if strings.HasSuffix(lower, u.suffix) {
			digits, shift = s[:len(s)-len(u.suffix)], u.shift
			break
		}
	}
	bad := func() error {
		return syntaxf("bad size %q: want bytes or a number with K, M or G", s)
	}
	if digits == "" {
		return 0, bad()
	}
	for _, r := range digits {
		if r < '0' || r > '9' {
			return 0, bad()
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || (shift > 0 && n > (1<<63-1)>>shift) {
		return 0, syntaxf("bad size %q: too large", s)
	}
	return n << shift, nil
}

// FormatSize writes n in the largest unit that holds it exactly: 4096 is
// "4K", 1<<30 is "1G", 1000 is "1000". ParseSize reads it back.
func FormatSize(n int64) string {
	if n <= 0 {
		return strconv.FormatInt(n, 10)
	}
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"G", 30}, {"M", 20}, {"K", 10}} {
		if n&(1<<u.shift-1) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// parseBool reads a boolean option's value.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "on", "yes", "1":
		return true, nil
	case "false", "off", "no", "0":
		return false, nil
	}
	return false, syntaxf("bad boolean %q: want true, false, on, off, yes, no, 1 or 0", s)
}

func formatBool(b bool) string { return strconv.FormatBool(b) }

// ParseDuration reads a duration as a user writes one: a Go duration
// ("100ms", "1m30s"; "0" is zero), whose units may also be d (24h) and w
// (7d), in any mix ("1w2d3h", "1.5d"). Every duration the project reads from
// a user, flag or -o option, goes through it. A bad unit, a missing one, or a
// result past the range of time.Duration (about 290 years) is ErrSyntax.
func ParseDuration(s string) (time.Duration, error) {
	bad := func(why string) error {
		return syntaxf("bad duration %q: %s; want a duration such as 100ms, 1m30s, 12h, 7d or 1w2d", s, why)
	}
	rest, neg := s, false
	if r, ok := strings.CutPrefix(rest, "-"); ok {
		rest, neg = r, true
	} else {
		rest = strings.TrimPrefix(rest, "+")
	}
	if rest == "0" {
		return 0, nil
	}
	if rest == "" {
		return 0, bad("empty")
	}
	var total time.Duration
	for rest != "" {
		// One term: a number (digits, maybe a fraction), then a unit.
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		j := i
		for j < len(rest) && !(rest[j] >= '0' && rest[j] <= '9' || rest[j] == '.') {
			j++
		}
		num, unit := rest[:i], rest[i:j]
		rest = rest[j:]
		if num == "" || num == "." {
			return 0, bad("a unit without a number")
		}
		if unit == "" {
			return 0, bad("a number without a unit")
		}
		var term time.Duration
		var err error
		switch unit {
		case "d", "w":
			// In hours, which time.ParseDuration bounds; then scaled, checked.
			mult := time.Duration(24)
			if unit == "w" {
				mult = 7 * 24
			}
			term, err = time.ParseDuration(num + "h")
			if err == nil && term > math.MaxInt64/mult {
				return 0, bad("too large")
			}
			term *= mult
		default:
			term, err = time.ParseDuration(num + unit)
		}
		if err != nil {
			if strings.Contains(err.Error(), "unknown unit") {
				return 0, bad(fmt.Sprintf("unknown unit %q", unit))
			}
			if strings.Count(num, ".") > 1 {
				return 0, bad(fmt.Sprintf("bad number %q", num))
			}
			return 0, bad("too large")
		}
		if total > math.MaxInt64-term {
			return 0, bad("too large")
		}
		total += term
	}
	if neg {
		total = -total
	}
	return total, nil
}

// parseInt reads a plain decimal count.
func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, syntaxf("bad integer %q: want decimal digits", s)
	}
	return n, nil
}

// isPowerOfTwo reports whether n is a positive power of two.
func isPowerOfTwo(n int64) bool { return n > 0 && bits.OnesCount64(uint64(n)) == 1 }
