package s3_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// TestS3Explain: the failures a user fixes in the configuration, produced by
// the real S3 server (or a port nobody listens on), come out as one line
// naming the bucket and the endpoint, of the right Kind, with the original
// error still reachable and no SDK request id in the text.
func TestS3Explain(t *testing.T) {
	good := s3test.Config(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close() // connections to it are refused from now on

	cases := []struct {
		name   string
		change func(*s3.Config)
		kind   error
		want   []string // in the message
	}{
		{"missing bucket", func(c *s3.Config) { c.Bucket = "no-such-bucket-ckptfs" },
			s3.ErrNoSuchBucket, []string{`no bucket "no-such-bucket-ckptfs" at ` + good.Endpoint, "check the bucket name"}},
		{"bad secret", func(c *s3.Config) { c.SecretKey = "wrong" + c.SecretKey },
			s3.ErrBadCredentials, []string{`bucket "` + good.Bucket + `" at ` + good.Endpoint + ` refused the credentials`, "secret key"}},
		{"bad access key", func(c *s3.Config) { c.AccessKey = "NOSUCHKEY" },
			s3.ErrBadCredentials, []string{"refused the credentials", "access key"}},
		{"closed port", func(c *s3.Config) { c.Endpoint = closed },
			s3.ErrUnreachable, []string{"connection refused: cannot reach " + closed + ` for bucket "` + good.Bucket + `": check endpoint=`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if good.AccessKey == "" && c.name != "missing bucket" && c.name != "closed port" {
				t.Skip("the server's credentials come from the environment")
			}
			cfg := good
			cfg.Timeouts.RetryMax = time.Millisecond // no retries: the answer is the same
			c.change(&cfg)
			s, err := s3.New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _, gerr := s.Get(ctx, "ckptfs.json", staging.Range{})
			if gerr == nil {
				t.Fatal("Get succeeded")
			}
			err = s.Explain(gerr)
			var p *s3.Problem
			if !errors.As(err, &p) || !errors.Is(err, c.kind) {
				t.Fatalf("Explain(%v) = %v, want a Problem of kind %v", gerr, err, c.kind)
			}
			if errors.Is(gerr, staging.ErrNotFound) {
				// A caller answers a missing object by creating one.
				t.Errorf("%v looks like a missing object", gerr)
			}
			if !errors.Is(err, gerr) {
				t.Errorf("the explained error lost the original")
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not say %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") || strings.Contains(strings.ToLower(msg), "request id") || strings.Contains(msg, cfg.SecretKey) && cfg.SecretKey != "" {
				t.Errorf("message %q is not one clean line", msg)
			}
		})
	}
	// Not a configuration problem: unchanged.
	s := s3test.NewS3(t)
	_, _, err = s.Get(context.Background(), "missing", staging.Range{})
	if got := s.Explain(err); got != err || !errors.Is(got, staging.ErrNotFound) {
		t.Errorf("Explain of a missing key = %v, want it unchanged", got)
	}
}

// TestS3ExplainKinds: the answers the local server cannot produce (a wrong
// region, access denied, DNS) are classified too, and what is no
// configuration problem is left alone.
func TestS3ExplainKinds(t *testing.T) {
	s, err := s3.New(context.Background(), s3.Config{Bucket: "b", Region: "eu-west-1", AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	status := func(code int, hdr http.Header) error {
		return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code, Header: hdr}},
			Err:      errors.New("http error")}}
	}
	api := func(code string) error { return &smithy.GenericAPIError{Code: code, Message: "m"} }
	cases := []struct {
		name string
		err  error
		kind error  // nil: left alone
		want string // in the message
	}{
		{"access denied", api("AccessDenied"), s3.ErrAccessDenied, `access denied to bucket "b" at AWS S3 (region eu-west-1)`},
		{"403 without body", status(403, nil), s3.ErrAccessDenied, "access denied"},
		{"redirect", api("PermanentRedirect"), s3.ErrWrongRegion, "check region="},
		{"301 with region", status(301, http.Header{"X-Amz-Bucket-Region": {"us-west-2"}}), s3.ErrWrongRegion, "region=us-west-2"},
		{"malformed authorization", api("AuthorizationHeaderMalformed"), s3.ErrWrongRegion, "another region"},
		{"unknown key", api("InvalidAccessKeyId"), s3.ErrBadCredentials, "unknown access key"},
		{"dns", &net.OpError{Op: "dial", Err: &net.DNSError{Name: "nohost.example", Err: "no such host"}}, s3.ErrUnreachable, "lookup nohost.example: no such host: cannot reach"},
		{"no credentials", errors.New("operation error S3: GetObject, get identity: get credentials: failed to refresh cached credentials, no EC2 IMDS role found"),
			s3.ErrNoCredentials, `no credentials for bucket "b" at AWS S3 (region eu-west-1): give credentials_file=PATH`},
		{"server error", status(500, nil), nil, ""},
		{"missing key", api("NoSuchKey"), nil, ""},
		{"other", errors.New("boom"), nil, ""},
	}
	for _, c := range cases {
		got := s.Explain(fmt.Errorf("s3 get k: %w", c.err))
		if c.kind == nil {
			var p *s3.Problem
			if errors.As(got, &p) {
				t.Errorf("%s: explained as %v", c.name, got)
			}
			continue
		}
		if !errors.Is(got, c.kind) || !errors.Is(got, c.err) || !strings.Contains(got.Error(), c.want) {
			t.Errorf("%s: Explain = %q, want kind %v saying %q", c.name, got, c.kind, c.want)
		}
	}
	if s.Explain(nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
}

// TestExplainCauseFirst: a message says what the network or the server said
// before the advice, for a failed request and for New's question of the
// bucket's region.
func TestExplainCauseFirst(t *testing.T) {
	s, err := s3.New(context.Background(), s3.Config{Bucket: "b", Region: "eu-west-1", AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	dns := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Name: "s3.amazonaws.com", Err: "no such host"}}
	cases := []struct {
		name          string
		err           error
		cause, advice string // cause must come first
	}{
		{"request", s.Explain(fmt.Errorf("s3 get k: %w", dns)), "lookup s3.amazonaws.com: no such host", "check endpoint="},
		{"region lookup", s3.ExplainNew("b",
			fmt.Errorf("s3 bucket b: no region configured (region=, AWS_REGION or the profile): find the bucket's region: %w", dns)),
			"lookup s3.amazonaws.com: no such host", "set region="},
		{"region", s.Explain(&smithy.GenericAPIError{Code: "PermanentRedirect"}), "PermanentRedirect", "check region="},
	}
	for _, c := range cases {
		msg := c.err.Error()
		if !strings.HasPrefix(msg, c.cause) || !strings.Contains(msg, c.advice) || !errors.Is(c.err, s3.ErrUnreachable) && c.name != "region" {
			t.Errorf("%s: %q, want it to start with %q and then say %q", c.name, msg, c.cause, c.advice)
		}
	}
	plain := errors.New("s3 bucket b: profile p: not found")
	if got := s3.ExplainNew("b", plain); got != plain {
		t.Errorf("ExplainNew changed an error no configuration fixes: %v", got)
	}
}
