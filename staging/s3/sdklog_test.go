package s3_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/smithy-go/logging"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ckptfs/ckptfs/staging/s3"
)

func TestSDKLoggerRoutesToZap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := s3.SDKLogger(zap.New(core))
	l.Logf(logging.Warn, "Response has no supported checksum. Not validating response payload.")
	l.Logf(logging.Debug, "request %d", 7)
	// Nothing to do about it, and the first line of a chain that finds
	// no credentials: debug.
	l.Logf(logging.Warn, "falling back to IMDSv1: %v", "404")
	got := logs.AllUntimed()
	if len(got) != 3 {
		t.Fatalf("%d entries, want 3: %+v", len(got), got)
	}
	for i, want := range []struct {
		level zapcore.Level
		msg   string
	}{{zapcore.WarnLevel, "Response has no supported checksum. Not validating response payload."}, {zapcore.DebugLevel, "request 7"},
		{zapcore.DebugLevel, "falling back to IMDSv1: 404"}} {
		if got[i].Level != want.level || got[i].Message != want.msg || got[i].LoggerName != "aws" {
			t.Errorf("entry %d: %s %q (logger %q), want %s %q (logger aws)", i, got[i].Level, got[i].Message, got[i].LoggerName, want.level, want.msg)
		}
	}
	// No logger: lines are discarded, not printed.
	s3.SDKLogger(nil).Logf(logging.Warn, "dropped")
}

// fakeIMDS starts a stand-in for the EC2 instance metadata service that the
// SDK is pointed at, answering 404 to everything (as a proxy in front of a
// machine off EC2 may), and returns how many requests it got.
func fakeIMDS(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", srv.URL)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "")
	// Nothing from the user's own configuration.
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/credentials")
	t.Setenv("AWS_PROFILE", "")
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(v, "")
	}
	return &n
}

// TestS3NoIMDSWithStaticCredentials: with static credentials (in the
// configuration or the environment) and a region, a store never asks the
// instance metadata service, not even in defaults mode auto, which asks it
// for the region. Without credentials it does (the chain's last resort), and
// the SDK's note of a fall-back to IMDSv1 goes to the store's logger at
// debug: a warning before the error that says there are no credentials
// only misled.
func TestS3NoIMDSWithStaticCredentials(t *testing.T) {
	for _, tc := range []struct {
		name     string
		keys     bool // in the Config
		envKeys  bool
		file     bool // a credentials file
		wantIMDS bool
	}{
		{"config keys", true, false, false, false},
		{"environment keys", false, true, false, false},
		{"credentials file", false, false, true, false},
		{"no keys", false, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			imds := fakeIMDS(t)
			t.Setenv("AWS_DEFAULTS_MODE", "auto")
			if tc.envKeys {
				t.Setenv("AWS_ACCESS_KEY_ID", "a")
				t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
			}
			fake, _ := newFakeS3(t)
			core, logs := observer.New(zapcore.DebugLevel)
			c := s3.Config{Bucket: "b", Endpoint: fake.url, PathStyle: true, Region: "us-east-1", Logger: zap.New(core)}
			if tc.keys {
				c.AccessKey, c.SecretKey = "a", "s"
			}
			if tc.file {
				c.CredentialsFile = credsFile(t, "a:s\n", 0o600)
			}
			s := newS3(t, c)
			_, err := s.Head(t.Context(), "k")
			if got := imds.Load() > 0; got != tc.wantIMDS {
				t.Fatalf("IMDS got %d requests (head: %v), want requests: %t", imds.Load(), err, tc.wantIMDS)
			}
			if tc.wantIMDS {
				var msgs []string
				for _, e := range logs.AllUntimed() {
					msgs = append(msgs, e.Level.String()+" "+e.Message)
				}
				if logs.FilterMessageSnippet("IMDSv1").FilterLevelExact(zapcore.DebugLevel).Len() == 0 ||
					logs.FilterLevelExact(zapcore.WarnLevel).Len() > 0 {
					t.Errorf("the store's log: %s; want the IMDSv1 fall-back at debug and no warning", strings.Join(msgs, "; "))
				}
			}
		})
	}
}
