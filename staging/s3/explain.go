package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/ckptfs/ckptfs/staging"
)

// What a failed S3 request means to the person who configured the store:
// the Kind of an Problem, for errors.Is.
var (
	// ErrNoSuchBucket: the server has no bucket of that name.
	ErrNoSuchBucket = errors.New("no such bucket")
	// ErrAccessDenied: the credentials are valid but not allowed this.
	ErrAccessDenied = errors.New("access denied")
	// ErrBadCredentials: the server knows no such access key, or the
	// secret key does not match it.
	ErrBadCredentials = errors.New("wrong access key or secret key")
	// ErrNoCredentials: the credential chain found none (no keys in the
	// environment, no profile, no instance role).
	ErrNoCredentials = errors.New("no credentials")
	// ErrUnreachable: no connection to the endpoint (refused, no such
	// host, no route).
	ErrUnreachable = errors.New("endpoint unreachable")
	// ErrWrongRegion: the bucket is in another region than the one the
	// request was signed for.
	ErrWrongRegion = errors.New("wrong region")
	// ErrUntrustedCert: the endpoint's TLS certificate is signed by no
	// CA this process trusts (or names another host, or has expired).
	ErrUntrustedCert = errors.New("certificate not trusted")
)

// Problem is a failed S3 request explained in one line: which bucket, at
// which endpoint, and what to check. Err is the error as the store returned
// it; errors.Is and errors.As reach both it and Kind. Error() leaves out
// what only the SDK cares about (request ids, retry counts).
type Problem struct {
	Kind     error  // one of ErrNoSuchBucket, ErrAccessDenied, ...
	Bucket   string // the bucket name
	Endpoint string // where it was asked, as shown: redacted URL or "AWS S3 (region R)"
	Detail   string // what the server or the network said, short
	Hint     string // what to check, when not the Kind's usual advice
	Err      error
}

// Error says the cause first (what the server or the network said), then
// where, then what to check: the advice reads as the consequence of the
// cause, and a reader who stops early still has the fact.
func (p *Problem) Error() string {
	if p.Hint != "" {
		return fmt.Sprintf("%s: bucket %q at %s: %s", p.cause(), p.Bucket, p.Endpoint, p.Hint)
	}
	switch p.Kind {
	case ErrNoSuchBucket:
		return fmt.Sprintf("no bucket %q at %s: check the bucket name in the store URL (and endpoint=)", p.Bucket, p.Endpoint)
	case ErrAccessDenied:
		return fmt.Sprintf("access denied to bucket %q at %s: check that the credentials' policy allows ckptfs's S3 actions on it (docs/operations.md)", p.Bucket, p.Endpoint)
	case ErrBadCredentials:
		return fmt.Sprintf("%s: bucket %q at %s refused the credentials: check the access key and secret key (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, credentials_file= or the profile)", p.Detail, p.Bucket, p.Endpoint)
	case ErrNoCredentials:
		return fmt.Sprintf("no credentials for bucket %q at %s: give credentials_file=PATH (a file of keys, mode 600), set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, name a profile= of ~/.aws, or give the machine a role", p.Bucket, p.Endpoint)
	case ErrUnreachable:
		return fmt.Sprintf("%s: cannot reach %s for bucket %q: check endpoint= and that the server is up", p.Detail, p.Endpoint, p.Bucket)
	case ErrWrongRegion:
		return fmt.Sprintf("%s: bucket %q at %s is in another region: check region=", p.Detail, p.Bucket, p.Endpoint)
	case ErrUntrustedCert:
		return fmt.Sprintf("%s: the endpoint's certificate is not trusted (%s, bucket %q): give its CA with ca_bundle=PATH (a PEM file) or AWS_CA_BUNDLE", p.Detail, p.Endpoint, p.Bucket)
	}
	return fmt.Sprintf("bucket %q at %s: %v", p.Bucket, p.Endpoint, p.Err)
}

// cause is Detail, or the Kind when the server or the network said nothing
// more.
func (p *Problem) cause() string {
	if p.Detail != "" {
		return p.Detail
	}
	return p.Kind.Error()
}

func (p *Problem) Unwrap() []error { return []error{p.Kind, p.Err} }

// ShownEndpoint is where s sends its requests, for messages: the endpoint
// URL without user information, or AWS and the region.
func (s *Store) ShownEndpoint() string {
	if s.endpoint != "" {
		return staging.RedactURL(s.endpoint)
	}
	return "AWS S3 (region " + s.region + ")"
}

// Explain returns err as an *Problem when it is one of the failures a
// user fixes in the configuration (a wrong bucket, credentials, endpoint or
// region), and err unchanged otherwise (nil stays nil).
func (s *Store) Explain(err error) error {
	if err == nil {
		return nil
	}
	var p *Problem
	if errors.As(err, &p) {
		return err
	}
	kind, detail := classifyS3(err)
	if kind == nil {
		return err
	}
	return &Problem{Kind: kind, Bucket: s.bucket, Endpoint: s.ShownEndpoint(), Detail: detail, Err: err}
}

// globalEndpoint is where New asks for a bucket's region when none is
// configured (client.go), as messages show it.
const globalEndpoint = "https://s3.amazonaws.com"

// ExplainNew returns the error New returned for bucket as an *Problem when it is
// one the user fixes, and err unchanged otherwise. New reaches the network
// only to ask S3's global endpoint for the bucket's region (no endpoint, no region
// configured), so a network failure there says that what failed is the
// question, and that a configured region skips it.
func ExplainNew(bucket string, err error) error {
	if err == nil {
		return nil
	}
	var p *Problem
	if errors.As(err, &p) {
		return err
	}
	kind, detail := classifyS3(err)
	if kind == nil {
		return err
	}
	return &Problem{Kind: kind, Bucket: bucket, Endpoint: globalEndpoint, Detail: detail, Err: err,
		Hint: "asking for the bucket's region failed: set region= (or AWS_REGION), or check the network"}
}

// classifyS3 is the Kind of err and a short detail, or nil.
func classifyS3(err error) (error, string) {
	code := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	status := 0
	region := ""
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
		if re.Response != nil {
			region = re.Response.Header.Get("X-Amz-Bucket-Region")
		}
	}
	switch code {
	case "NoSuchBucket":
		return ErrNoSuchBucket, code
	case "InvalidAccessKeyId", "XAdminUserNotFound":
		return ErrBadCredentials, "unknown access key"
	case "SignatureDoesNotMatch":
		return ErrBadCredentials, "the secret key does not match the access key"
	case "AccessDenied", "AllAccessDisabled":
		return ErrAccessDenied, code
	case "PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException":
		if region != "" {
			return ErrWrongRegion, "the server says region=" + region
		}
		return ErrWrongRegion, code
	}
	if code == "" || code == "MovedPermanently" || code == "Forbidden" {
		// Answers without a body (HEAD) have only their status.
		switch status {
		case http.StatusMovedPermanently:
			if region != "" {
				return ErrWrongRegion, "the server says region=" + region
			}
			return ErrWrongRegion, "301 Moved Permanently"
		case http.StatusForbidden:
			return ErrAccessDenied, "403 Forbidden"
		}
	}
	// The SDK fails before sending when its credential chain found nothing;
	// it has no type for that, only these words (aws.CredentialsCache and
	// the signing middleware).
	if msg := err.Error(); strings.Contains(msg, "get identity: get credentials:") || strings.Contains(msg, "failed to refresh cached credentials") {
		return ErrNoCredentials, ""
	}
	if status != 0 {
		return nil, "" // the server answered: not a network failure
	}
	if kind, detail := classifyCert(err); kind != nil {
		return kind, detail
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		// As the resolver says it, without its own address.
		return ErrUnreachable, "lookup " + dns.Name + ": " + dns.Err
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return ErrUnreachable, "connection refused"
	}
	if errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return ErrUnreachable, "no route to host"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		if op.Timeout() {
			return ErrUnreachable, "connect timed out"
		}
		return ErrUnreachable, op.Err.Error()
	}
	return nil, ""
}

// classifyCert is ErrUntrustedCert and why, when err is a failed
// verification of the server's certificate.
func classifyCert(err error) (error, string) {
	var ua x509.UnknownAuthorityError
	var host x509.HostnameError
	var inv x509.CertificateInvalidError
	var cv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &ua):
		return ErrUntrustedCert, "signed by an unknown authority"
	case errors.As(err, &host):
		return ErrUntrustedCert, "issued for another host than " + host.Host
	case errors.As(err, &inv):
		return ErrUntrustedCert, inv.Error()
	case errors.As(err, &cv):
		return ErrUntrustedCert, cv.Err.Error()
	}
	return nil, ""
}

// Diagnose tries a TCP connection to the endpoint, within ctx and the
// connect timeout, and returns an *Problem of kind ErrUnreachable when
// there is none, or nil. A caller whose requests ran out of time calls it to
// say why: the SDK's last error is then only the deadline.
func (s *Store) Diagnose(ctx context.Context) error {
	host := ""
	if s.endpoint != "" {
		u, err := url.Parse(s.endpoint)
		if err != nil {
			return nil
		}
		host = u.Host
		if u.Port() == "" {
			if u.Scheme == "https" {
				host += ":443"
			} else {
				host += ":80"
			}
		}
	} else {
		host = "s3." + s.region + ".amazonaws.com:443"
	}
	ctx, cancel := context.WithTimeout(ctx, s.connect)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err == nil {
		c.Close()
		return nil
	}
	kind, detail := classifyS3(err)
	if kind == nil {
		kind, detail = ErrUnreachable, err.Error()
	}
	return &Problem{Kind: kind, Bucket: s.bucket, Endpoint: s.ShownEndpoint(), Detail: detail, Err: err}
}
