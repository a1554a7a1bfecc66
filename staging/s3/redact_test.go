package s3_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging/s3"
)

// An endpoint with user information is refused, and neither the refusal
// nor the configuration's String shows the secret.
func TestS3EndpointUserinfoNeverPrinted(t *testing.T) {
	c := s3.Config{Bucket: "b", Endpoint: "http://AKIAKEY:s3cret@127.0.0.1:7070", Region: "us-east-1"}
	_, err := s3.New(context.Background(), c)
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
