package staging

import "strings"

// RedactURL returns s, a store URL or endpoint as a user gave it, without its
// user information ("s3://KEY:SECRET@bucket" becomes "s3://bucket"), so that
// it may be printed in an error or a log. It works on text that does not
// parse as a URL too (a bad escape in a password is still a password): the
// authority is what follows "://" up to the next '/', '?' or '#', and its
// user information is everything up to its last '@'.
func RedactURL(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		// "user:pass@host" without a scheme: no URL parser reads it as
		// user information, but a person may have meant it as one.
		if at := strings.LastIndexByte(s, '@'); at >= 0 && !strings.ContainsAny(s[:at], "/?#") {
			return "<redacted>@" + s[at+1:]
		}
		return s
	}
	start := i + len("://")
	end := len(s)
	if j := strings.IndexAny(s[start:], "/?#"); j >= 0 {
		end = start + j
	}
	at := strings.LastIndexByte(s[start:end], '@')
	if at < 0 {
		return s
	}
	return s[:start] + s[start+at+1:]
}
