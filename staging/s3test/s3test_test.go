package s3test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3"
)

func TestFromEnviron(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		want     Env
		found    bool
		errorHas string
	}{
		{"nothing", nil, Env{}, false, ""},
		{"endpoint and bucket", map[string]string{"CKPTFS_S3_ENDPOINT": "http://127.0.0.1:9", "CKPTFS_S3_BUCKET": "b", "AWS_REGION": "eu-west-1"},
			Env{Endpoint: "http://127.0.0.1:9", Bucket: "b", Region: "eu-west-1"}, true, ""},
		{"AWS bucket with prefix", map[string]string{"CKPTFS_S3_BUCKET": "b", "CKPTFS_S3_PREFIX": "ci/"},
			Env{Bucket: "b", Prefix: "ci/"}, true, ""},
		{"keys from the environment", map[string]string{"CKPTFS_S3_BUCKET": "b", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
			Env{Bucket: "b", AccessKey: "k", SecretKey: "s"}, true, ""},
		{"endpoint without bucket", map[string]string{"CKPTFS_S3_ENDPOINT": "http://127.0.0.1:9"}, Env{}, false, "CKPTFS_S3_BUCKET is not"},
		{"prefix without slash", map[string]string{"CKPTFS_S3_BUCKET": "b", "CKPTFS_S3_PREFIX": "ci"}, Env{}, false, "does not end with '/'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"CKPTFS_S3_ENDPOINT", "CKPTFS_S3_BUCKET", "CKPTFS_S3_PREFIX", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
				t.Setenv(k, tc.env[k])
			}
			got, found, err := FromEnviron()
			if tc.errorHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errorHas) {
					t.Fatalf("error %v, want one saying %q", err, tc.errorHas)
				}
				return
			}
			if err != nil || found != tc.found || got != tc.want {
				t.Fatalf("FromEnviron() = %+v, %t, %v; want %+v, %t", got, found, err, tc.want, tc.found)
			}
		})
	}
}

// TestServer starts a server, uses its bucket, and stops it.
func TestServer(t *testing.T) {
	srv, err := Start(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = srv.Stop()
		}
	})
	s, err := s3.New(t.Context(), srv.Config("t/"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "k", []byte("v"), staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(srv.Dir + "/root/" + srv.Bucket + "/t/k"); err != nil {
		t.Errorf("the object is not in the server's root: %v", err)
	}
	stopped = true
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(srv.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is left after Stop: %v", srv.Dir, err)
	}
	select {
	case <-srv.done:
	default:
		t.Error("the server still runs after Stop")
	}
	if _, err := s.Head(t.Context(), "k"); err == nil {
		t.Error("the server still answers after Stop")
	}
}

func TestUniquePrefix(t *testing.T) {
	a, b := UniquePrefix(t), UniquePrefix(t)
	if a == b {
		t.Errorf("two prefixes are both %q", a)
	}
	if err := staging.ValidateKey(a + "x"); err != nil || !strings.HasSuffix(a, "/") {
		t.Errorf("prefix %q is not a folder: %v", a, err)
	}
}
