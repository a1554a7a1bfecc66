package staging_test

import (
	"context"
	"strings"
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

// An endpoint with user information is refused, and neither the refusal
// nor the configuration's String shows the secret.
func TestS3EndpointUserinfoNeverPrinted(t *testing.T) {
	c := staging.S3Config{Bucket: "b", Endpoint: "http://AKIAKEY:s3cret@127.0.0.1:7070", Region: "us-east-1"}
	_, err := staging.NewS3(context.Background(), c)
	if err == nil {
		t.Fatal("an endpoint with user information was accepted")
	}
	for _, s := range []string{err.Error(), c.String(), c.GoString()} {
		if strings.Contains(s, "s3cret") || strings.Contains(s, "AKIAKEY") {
			t.Errorf("printed the user information: %s", s)
		}
	}
	if !strings.Contains(err.Error(), "127.0.0.1:7070") {
		t.Errorf("the refusal does not name the endpoint: %v", err)
	}
}
