package config

import (
	"slices"
	"strings"
)

// storeOptionNames are the -o items that choose and reach the store, which
// the command reads itself (cmd/ckptfs takeStoreOpts) before Parse sees the
// rest. The parser knows their names only to suggest them for a typo:
// "endpont" is nearest endpoint, which Parse never takes.
var storeOptionNames = append(slices.Clone(storeOwnNames), storeAliasNames...)

// storeOwnNames are the store options under their own names, listed by an
// unknown option's message beside the tunables.
var storeOwnNames = []string{
	"endpoint", "region", "profile", "credentials_file", "path_style", "sse", "sse_kms_key_id",
	"storage_class", "requester_pays", "ca_bundle", "checksum", "log_file",
	"create", "mount_timeout", "single_writer",
}

// storeAliasNames are s3fs's names of store options: use_path_request_style
// is path_style, logfile is log_file, passwd_file is credentials_file,
// use_sse is sse (and sse_kms_key_id with kmsid:ID).
var storeAliasNames = []string{"use_path_request_style", "logfile", "passwd_file", "use_sse"}

// storeFlagNames are the store options that take no value.
var storeFlagNames = []string{"path_style", "use_path_request_style", "requester_pays", "create", "single_writer"}

// CompletionItems is what shell completion offers for an -o item: every
// name the parser knows but those it refuses, each as it is typed: "name="
// for an option that takes a value, the bare name for a word that takes
// none (a boolean, whose bare name is true, or a word of mount(8)). Sorted.
func CompletionItems() []string {
	var out []string
	for _, n := range knownNames() {
		if _, refused := unsupportedFlags[n]; refused {
			continue
		}
		switch o := lookup(n); {
		case o != nil && o.kind == kindBool:
		case o != nil:
			n += "="
		case slices.Contains(storeOptionNames, n) && !slices.Contains(storeFlagNames, n):
			n += "="
		}
		out = append(out, n)
	}
	return out
}

// StoreOptionNames is the names of the store options, those the command
// reads before Parse (see storeOptionNames).
func StoreOptionNames() []string { return slices.Clone(storeOptionNames) }

// knownNames is every name the option parser knows: the options, the
// words of mount(8) it reads as options or ignores, and the store options.
func knownNames() []string {
	out := names()
	for n := range genericMountFlags {
		out = append(out, n)
	}
	for n := range mountFlagAliases {
		out = append(out, n)
	}
	for n := range unsupportedFlags {
		out = append(out, n)
	}
	for n := range optionAliases {
		out = append(out, n)
	}
	out = append(out, storeOptionNames...)
	slices.Sort(out) // a fixed order, so that a tie is broken the same way every time
	return slices.Compact(out)
}

// IsKnown reports whether the option parser knows name: an option, a word
// of mount(8) it reads or ignores, or a store option.
func IsKnown(name string) bool { return slices.Contains(knownNames(), name) }

// Suggest is the known option name nearest to name, for "did you mean",
// or "" when none is near enough: within an edit distance of 2, and of a
// third of name's length but at least 1 (a short name has few letters to
// spare: "xy" is no typo of ro).
// Case does not count: "Endpoint" suggests endpoint.
func Suggest(name string) string {
	return suggestFrom(name, knownNames())
}

func suggestFrom(name string, known []string) string {
	lower := strings.ToLower(name)
	limit := min(2, max(1, len([]rune(lower))/3))
	best, bestD := "", limit+1
	for _, k := range known {
		if k == name {
			continue // the name is known; nothing to suggest
		}
		if d := editDistance(lower, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance (Damerau-Levenshtein
// without moving a substring twice) between a and b, in runes: insertions,
// deletions, substitutions and swaps of two neighbours each cost 1, so a
// transposed pair ("endpiont") is one typo, not two. Names are short: the
// three rows cost nothing to speak of.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1) // row i-2
	prev := make([]int, len(rb)+1)  // row i-1
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// unknownOption is the error of an option name no option has, with the
// nearest known name, if any, to suggest.
func unknownOption(name, value string) *OptionError {
	return &OptionError{Name: name, Value: value, Suggestion: Suggest(name), Err: ErrUnknownOption}
}
