package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestSuggest: a mistyped name gets the nearest name the parser knows,
// store options and mount(8)'s words included, when it is near enough.
func TestSuggest(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"endpont", "endpoint"},  // a store option, one letter dropped
		{"endpiont", "endpoint"}, // a swap of neighbours is one typo
		{"Endpoint", "endpoint"}, // case
		{"regoin", "region"},     // store option, swapped
		{"s3_request_timeot", "s3_request_timeout"},
		{"s3_requst_timeot", "s3_request_timeout"}, // two typos in a long name
		{"data_blok_size", "data_block_size"},
		{"flush_on_clse", "flush_on_close"},
		{"lgo", "log"}, // short: one typo allowed
		{"nodeev", "nodev"},
		{"_netdv", "_netdev"},    // a generic flag
		{"nonemtpy", "nonempty"}, // an unsupported one: its reason follows
		{"singel_writer", "single_writer"},
		{"mount_timout", "mount_timeout"},
		{"foo", ""},
		{"xy", ""}, // 2 letters: no 2-letter name is one typo away... but rw/ro are 2 away
		{"zzzzzzzzzz", ""},
		{"endpoint", ""}, // known: nothing to suggest
		{"", ""},
	} {
		if got := Suggest(tc.name); got != tc.want {
			t.Errorf("Suggest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"abc", "abc", 0},
		{"abc", "acb", 1}, {"kitten", "sitting", 3}, {"ca", "abc", 3},
		{"endpont", "endpoint", 1}, {"héllo", "hello", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := editDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.b, tc.a, got, tc.want)
		}
	}
}

// TestParseUnknownSuggests: every unknown option of a -o string is
// reported, each with its suggestion, in the message the user reads.
func TestParseUnknownSuggests(t *testing.T) {
	_, err := Parse(Default(), "endpont=http://x,wal,s3_request_timeot=5s,frobnicate=1,flush_intervl=1s")
	if err == nil {
		t.Fatal("Parse accepted unknown options")
	}
	msg := err.Error()
	for _, want := range []string{
		`unknown option "endpont" (did you mean endpoint?)`,
		`unknown option "s3_request_timeot" (did you mean s3_request_timeout?)`,
		`unknown option "flush_intervl" (did you mean flush_interval?)`,
		`unknown option "frobnicate" (known: `,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	var oe *OptionError
	if !errors.As(err, &oe) || !errors.Is(err, ErrUnknownOption) || oe.Suggestion != "endpoint" {
		t.Errorf("first problem %+v, want an unknown option suggesting endpoint", oe)
	}
	c := Default()
	if err := c.Set("wall", "true"); err == nil || err.Error() != `unknown option "wall" (did you mean wal?)` {
		t.Errorf("Set(wall) = %v", err)
	}
}

// TestCompletionItems: every name the parser takes is offered, as it is
// typed: with "=" when it takes a value.
func TestCompletionItems(t *testing.T) {
	items := CompletionItems()
	for _, n := range knownNames() {
		if _, refused := unsupportedFlags[n]; refused {
			if slices.Contains(items, n) || slices.Contains(items, n+"=") {
				t.Errorf("%s is refused but offered", n)
			}
			continue
		}
		if !slices.Contains(items, n) && !slices.Contains(items, n+"=") {
			t.Errorf("%s not offered", n)
		}
	}
	for _, want := range []string{"data_block_size=", "max_threads=", "endpoint=", "log_file=", "wal", "ro", "rw", "path_style", "create", "defaults"} {
		if !slices.Contains(items, want) {
			t.Errorf("%q not offered", want)
		}
	}
	for _, nope := range []string{"wal=", "path_style=", "endpoint", "nonempty"} {
		if slices.Contains(items, nope) {
			t.Errorf("%q offered", nope)
		}
	}
}
