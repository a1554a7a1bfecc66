// Package s3test gives tests a real S3 bucket: the one the environment names,
// or a bucket of a versitygw server (the S3 gateway pinned as a tool in
// scripts/tools/go.mod, a module of its own) that it starts on loopback,
// once per test binary.
//
// The environment, as scripts/s3-server prints it:
//
//	CKPTFS_S3_BUCKET       bucket to use; when set, no server is started
//	CKPTFS_S3_ENDPOINT     its endpoint URL (empty: AWS); path-style when set
//	CKPTFS_S3_PREFIX       optional folder ("ci/") under which tests write
//	AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_PROFILE, ...
//	                       the SDK's standard credential chain
//	CKPTFS_VERSITYGW       versitygw binary to start (default: go tool -n
//	                       versitygw, run in scripts/tools)
//
// Tests never skip for want of S3: when no bucket can be had, they fail and
// say why. Every test gets its own key prefix, so tests share one bucket, and
// what a test wrote is deleted when it ends.
//
// A package whose tests use S3 should have
//
//	func TestMain(m *testing.M) { s3test.Main(m) }
//
// so that the server it starts is stopped and its files removed when the
// tests end. Without it the server still dies with the test binary (it gets
// SIGKILL when its parent exits), and the next start removes what it left.
//
// # versitygw v1.8.0 (posix backend) against the Store contract
//
// It honours If-None-Match: * and If-Match on PutObject and
// CompleteMultipartUpload (412 PreconditionFailed; one winner among
// concurrent writers), StartAfter and MaxKeys, suffix ranges, 416
// InvalidRange, EntityTooSmall, NoSuchUpload on abort and upload part,
// user metadata, and the x-amz-checksum-crc32c, -crc32 and -crc64nvme of
// PutObject and UploadPart (a body that does not match is refused with 400
// BadDigest). It departs from S3 here:
//
//   - A key cannot also be a folder: after "x", PutObject "x/y" is 409
//     ObjectParentIsFile; after "x/y", PutObject "x" is 409
//     ExistingObjectIsDirectory. Tests keep such pairs out of the bucket.
//   - ListMultipartUploads cannot be continued: the markers of a truncated
//     answer (key-marker=K&upload-id-marker=U) get 400 InvalidArgument,
//     because the backend drops every upload of K before it looks for U.
//     Only listings of more than 1,000 uploads are truncated.
//   - CompleteMultipartUpload of an unknown upload id is 400 InvalidPart,
//     not 404 NoSuchUpload.
//   - "Range: bytes=-N" of an empty object is 200 with no body, not 416; the
//     store cuts the range itself when an answer has no Content-Range.
//   - encoding-type=url is ignored, and keys with control characters come
//     back from listings with U+FFFD in their place.
//   - A 412 sent before the request body is read closes the connection: a
//     client still sending sees "connection reset by peer" and retries.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3"
)

// Env is where a bucket is and how to reach it.
type Env struct {
	Endpoint string // "" for AWS
	Bucket   string
	Prefix   string // folder of the bucket the tests write under ("" or ".../")
	Region   string // "" for the SDK's chain
	// AccessKey and SecretKey: a server started here makes its own; for the
	// environment's bucket they are AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY when set, else empty (the SDK's chain finds them).
	AccessKey string
	SecretKey string
}

// Config is the store configuration of e, with prefix (a folder, "" or
// ending in '/') appended to e's prefix.
func (e Env) Config(prefix string) s3.Config {
	return s3.Config{
		Bucket:    e.Bucket,
		Prefix:    e.Prefix + prefix,
		Endpoint:  e.Endpoint,
		Region:    e.Region,
		PathStyle: e.Endpoint != "",
		AccessKey: e.AccessKey,
		SecretKey: e.SecretKey,
	}
}

// FromEnviron returns the bucket the environment names, and false when it
// names none (CKPTFS_S3_BUCKET unset).
func FromEnviron() (Env, bool, error) {
	bucket := os.Getenv("CKPTFS_S3_BUCKET")
	endpoint := os.Getenv("CKPTFS_S3_ENDPOINT")
	if bucket == "" {
		if endpoint != "" {
			return Env{}, false, errors.New("CKPTFS_S3_ENDPOINT is set but CKPTFS_S3_BUCKET is not")
		}
		return Env{}, false, nil
	}
	e := Env{Endpoint: endpoint, Bucket: bucket, Prefix: os.Getenv("CKPTFS_S3_PREFIX"), Region: os.Getenv("AWS_REGION"),
		AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY")}
	if e.Prefix != "" && !strings.HasSuffix(e.Prefix, "/") {
		return Env{}, false, fmt.Errorf("CKPTFS_S3_PREFIX %q does not end with '/'", e.Prefix)
	}
	return e, true, nil
}

// The bucket of this test binary, found or started on first use.
var shared struct {
	once sync.Once
	env  Env
	srv  *Server
	err  error
}

// Shared returns the bucket of this test binary: the environment's, or that
// of a server started on the first call.
func Shared() (Env, error) {
	shared.once.Do(func() {
		e, ok, err := FromEnviron()
		if err != nil || ok {
			shared.env, shared.err = e, err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		shared.srv, shared.err = Start(ctx, "")
		if shared.err == nil {
			shared.env = shared.srv.Env
		}
	})
	return shared.env, shared.err
}

// Main runs the tests and then stops the server they started, if any.
func Main(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "s3test:", err)
		}
	}
	os.Exit(code)
}

// Config returns the configuration of a folder of the shared bucket that is
// t's alone, and deletes what t left in it when t ends. It fails t if there
// is no bucket.
func Config(t testing.TB) s3.Config {
	t.Helper()
	e, err := Shared()
	if err != nil {
		t.Fatalf("no S3 bucket for the test: %v", err)
	}
	c := e.Config(UniquePrefix(t))
	t.Cleanup(func() { empty(t, c) })
	return c
}

// NewS3 returns an S3 store in a folder of the shared bucket that is t's
// alone (see Config).
func NewS3(t testing.TB) *s3.Store {
	t.Helper()
	s, err := s3.New(context.Background(), Config(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// NewStore is NewS3 as a staging.Store.
func NewStore(t testing.TB) staging.Store { return NewS3(t) }

// UniquePrefix is a folder name made of t's name and random bytes.
func UniquePrefix(t testing.TB) string {
	name := []byte(t.Name())
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			name[i] = '_'
		}
	}
	if len(name) > 100 {
		name = name[:100]
	}
	return "s3test/" + string(name) + "-" + randomHex(6) + "/"
}

// empty deletes every object and upload under c's prefix.
func empty(t testing.TB, c s3.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := c
	root.Prefix = ""
	s, err := s3.New(ctx, root)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	ups, err := s.ListMultipartUploads(ctx, c.Prefix)
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
	for _, u := range ups {
		if err := s.AbortMultipart(ctx, u.Key, u.UploadID); err != nil && !errors.Is(err, staging.ErrNotFound) {
			t.Errorf("cleanup: %v", err)
		}
	}
	objs, err := staging.ListAll(ctx, s, c.Prefix)
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
	for _, o := range objs {
		if err := s.Delete(ctx, o.Key); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}

// Server is a versitygw process serving a posix root on loopback, with one
// bucket.
type Server struct {
	Env
	Dir string // holds the root and the server's log

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	werr error         // cmd.Wait's error, set before done closes
}

// dirPattern names the temporary folders of servers, so that a start can
// find and remove what servers of dead test binaries left.
const dirPattern = "ckptfs-s3test-*"

// Start starts versitygw with a bucket "ckptfs" under a new folder of
// $TMPDIR and waits until it answers. bin is the binary; "" means
// $CKPTFS_VERSITYGW, else the one `go tool -n versitygw` names in
// scripts/tools (built into the Go build cache on first use, which takes
// minutes).
func Start(ctx context.Context, bin string) (*Server, error) {
	removeStale()
	if bin == "" {
		var err error
		if bin, err = versitygw(ctx); err != nil {
			return nil, err
		}
	}
	var lastErr error
	for range 3 { // the free port may be taken before the server binds it
		srv, err := start(ctx, bin)
		if err == nil {
			return srv, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// versitygw returns the path of the binary to run.
func versitygw(ctx context.Context) (string, error) {
	if p := os.Getenv("CKPTFS_VERSITYGW"); p != "" {
		return p, nil
	}
	dir, err := toolsDir(ctx)
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "tool", "-n", "versitygw")
	cmd.Dir = dir
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build versitygw (go tool -n versitygw in %s): %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	p := strings.TrimSpace(string(out))
	if p == "" {
		return "", errors.New("go tool -n versitygw printed no path")
	}
	return p, nil
}

// toolsDir returns the folder of the module that pins versitygw
// (scripts/tools of the repository): a module of its own, so that its
// requirements stay out of the graph of everyone who builds ckptfs.
func toolsDir(ctx context.Context) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "env", "GOMOD")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("find the module (go env GOMOD): %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("find versitygw: not inside the ckptfs module; set CKPTFS_VERSITYGW to its binary")
	}
	dir := filepath.Join(filepath.Dir(gomod), "scripts", "tools")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("find versitygw's module: %w; set CKPTFS_VERSITYGW to its binary", err)
	}
	return dir, nil
}

func start(ctx context.Context, bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		return nil, err
	}
	srv, err := startIn(ctx, bin, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return srv, nil
}

func startIn(ctx context.Context, bin, dir string) (*Server, error) {
	const bucket = "ckptfs"
	root := filepath.Join(dir, "root")
	// A bucket of the posix backend is a folder of its root.
	if err := os.MkdirAll(filepath.Join(root, bucket), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "versitygw.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	srv := &Server{
		Env: Env{
			Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
			Bucket:    bucket,
			Region:    "us-east-1",
			AccessKey: "test-" + randomHex(8),
			SecretKey: randomHex(20),
		},
		Dir:  dir,
		done: make(chan struct{}),
	}
	srv.cmd = exec.Command(bin,
		"--port", "127.0.0.1:"+strconv.Itoa(port),
		"--region", srv.Region,
		"--keep-alive", "--quiet",
		"posix", root)
	// Keys by environment, not argv, where other users could read them.
	srv.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+srv.AccessKey, "ROOT_SECRET_KEY="+srv.SecretKey)
	srv.cmd.Stdout, srv.cmd.Stderr = logf, logf
	// The server dies with the test binary, however that ends.
	srv.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := srv.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { // owned by srv: Stop waits for it through done
		srv.werr = srv.cmd.Wait()
		close(srv.done)
	}()
	if err := srv.waitReady(ctx, 60*time.Second); err != nil {
		_ = srv.Stop()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("versitygw on port %d: %w; its log:\n%s", port, err, tail(log, 2000))
	}
	return srv, nil
}

// waitReady polls until the server answers HTTP (any status: an unsigned
// request is refused, which proves it serves).
func (s *Server) waitReady(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.Header.Get("Server") != "" || resp.StatusCode > 0 {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("exited before answering: %v", s.werr)
		case <-ctx.Done():
			return fmt.Errorf("no answer within %v: last error: %v", limit, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops the server and removes its folder.
func (s *Server) Stop() error {
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("remove %s: %w", s.Dir, err)
	}
	return nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// removeStale removes the folders of servers whose test binary is gone.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue // being created, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
