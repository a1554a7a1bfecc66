package staging_test

import (
	"testing"

	"github.com/ckptfs/ckptfs/staging"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"s3://bucket/prefix":                  "s3://bucket/prefix",
		"s3://AKIAKEY:s3cret@bucket/vol":      "s3://bucket/vol",
		"s3://AKIAKEY:s3%zzcret@bucket/vol":   "s3://bucket/vol", // does not parse
		"http://u:p@a@127.0.0.1:7070/x?y=1":   "http://127.0.0.1:7070/x?y=1",
		"file://me:pw@/srv/store":             "file:///srv/store",
		"file:///srv/with@sign":               "file:///srv/with@sign",
		"mem://":                              "mem://",
		"key:secret@bucket":                   "<redacted>@bucket",
		"https://host:9000/path@not-userinfo": "https://host:9000/path@not-userinfo",
	} {
		if got := staging.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
