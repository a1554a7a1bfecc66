package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/middleware"
)

// Timeouts bound every request of an S3 store, so that a store that stops
// answering fails requests instead of hanging them. A zero field takes its
// default.
type Timeouts struct {
	// Connect bounds a TCP connect and a TLS handshake.
	Connect time.Duration
	// Request bounds the wait for the answer's headers once the request,
	// body included, is sent.
	Request time.Duration
	// Stall fails a request whose body the connection takes no byte of, or
	// whose answer's body brings no byte, for this long. A slow transfer
	// that moves passes; only one that stops fails.
	Stall time.Duration
	// RetryMax is how long a failed request is retried: no retry is
	// decided once this much time has passed since the first attempt. The
	// SDK's standard retryer chooses which errors are retried and waits
	// before each retry (exponential backoff with jitter, at most
	// MaxBackoff), for at most MaxAttempts attempts.
	RetryMax time.Duration
}

// Defaults of Timeouts.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultRequestTimeout = 60 * time.Second
	DefaultStallTimeout   = 30 * time.Second
	DefaultRetryMaxTime   = 2 * time.Minute
)

// MaxAttempts is the most attempts of one request, retries included, and
// MaxBackoff the longest wait before a retry.
const (
	MaxAttempts = 10
	MaxBackoff  = 20 * time.Second
)

// withDefaults fills the zero fields.
func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&t.Connect, DefaultConnectTimeout)
	def(&t.Request, DefaultRequestTimeout)
	def(&t.Stall, DefaultStallTimeout)
	def(&t.RetryMax, DefaultRetryMaxTime)
	return t
}

func (t Timeouts) validate() []error {
	var errs []error
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"connect", t.Connect}, {"request", t.Request}, {"stall", t.Stall}, {"retry max", t.RetryMax}} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("%s timeout %s is negative", f.name, f.d))
		}
	}
	return errs
}

// stallError is the error of a body that did not move for the stall
// timeout. Timeout() makes the SDK retry it, as any network timeout.
type stallError struct {
	what string
	d    time.Duration
}

func (e *stallError) Error() string   { return fmt.Sprintf("%s moved no byte for %s", e.what, e.d) }
func (e *stallError) Timeout() bool   { return true }
func (e *stallError) Temporary() bool { return true }

// isTimeout reports whether err, an error of the SDK, is a timeout: one of
// ours, one of the HTTP transport (connect, headers), or ctx's deadline.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// stallClient is the HTTP client of an S3 store: it fails a request whose
// body the transport stops taking, or whose answer's body stops coming, for
// longer than stall. The transport's own timeouts cover connecting and the
// wait for headers; those of net/http for bodies would bound a whole
// transfer, not its progress.
type stallClient struct {
	inner interface {
		Do(*http.Request) (*http.Response, error)
	}
	stall time.Duration
}

// watchdog cancels a request when it is armed for longer than d.
type watchdog struct {
	d      time.Duration
	cancel context.CancelFunc
	fired  atomic.Bool

	mu    sync.Mutex
	timer *time.Timer // GUARDED_BY(mu)
	done  bool        // GUARDED_BY(mu): disarmed for good
}

func newWatchdog(d time.Duration, cancel context.CancelFunc) *watchdog {
	return &watchdog{d: d, cancel: cancel}
}

// arm (re)starts the countdown.
func (w *watchdog) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(w.d, func() {
			w.fired.Store(true)
			w.cancel()
		})
		return
	}
	w.timer.Reset(w.d)
}

// disarm stops the countdown until the next arm.
func (w *watchdog) disarm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

// stop disarms for good.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

func (c *stallClient) Do(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	send := newWatchdog(c.stall, cancel)
	req = req.WithContext(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &sendBody{ReadCloser: req.Body, w: send}
	}
	if getBody := req.GetBody; getBody != nil {
		req.GetBody = func() (io.ReadCloser, error) {
			b, err := getBody()
			if err != nil || b == nil || b == http.NoBody {
				return b, err
			}
			return &sendBody{ReadCloser: b, w: send}, nil
		}
	}
	resp, err := c.inner.Do(req)
	send.stop()
	if err != nil {
		cancel()
		if send.fired.Load() {
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), &stallError{what: "request body", d: c.stall})
		}
		return nil, err
	}
	resp.Body = &recvBody{ReadCloser: resp.Body, w: newWatchdog(c.stall, cancel), cancel: cancel, left: resp.ContentLength}
	return resp, nil
}

// sendBody is a request body: once the transport has read from it, it must
// come back for more within the stall timeout, unless it read it all.
type sendBody struct {
	io.ReadCloser
	w *watchdog
}

func (b *sendBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.w.disarm() // all sent: the wait for headers has its own bound
	} else {
		b.w.arm()
	}
	return n, err
}

// recvBody is a response body: each read must bring a byte within the stall
// timeout. Time between reads is the reader's, not the server's.
type recvBody struct {
	io.ReadCloser
	w      *watchdog
	cancel context.CancelFunc
	left   int64 // bytes not read yet; -1: unknown
	eof    bool  // a read returned an error (io.EOF or another)
}

// drainMax is the most of a response body Close reads and discards so that
// its connection can serve the next request: a body closed before its end
// closes its connection, and a new one costs a TCP (and TLS) handshake. A
// longer rest is cheaper to drop with the connection than to receive, and
// a rest that takes longer than drainWait to come is dropped with it: a
// close never waits long for a stalled server.
const (
	drainMax  = 256 << 10
	drainWait = 500 * time.Millisecond
)

func (b *recvBody) Read(p []byte) (int, error) {
	b.w.arm()
	n, err := b.ReadCloser.Read(p)
	b.w.disarm()
	if b.left >= 0 {
		b.left -= int64(n)
	}
	if err != nil {
		b.eof = true
	}
	if err != nil && err != io.EOF && b.w.fired.Load() {
		err = &stallError{what: "response body", d: b.w.d}
	}
	return n, err
}

func (b *recvBody) Close() error {
	b.w.stop()
	if !b.eof && b.left <= drainMax {
		t := time.AfterFunc(drainWait, b.cancel)
		_, _ = io.Copy(io.Discard, io.LimitReader(b.ReadCloser, drainMax+1))
		t.Stop()
	}
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// opStartKey keys the time an operation started in its context.
type opStartKey struct{}

// addOpStart records when each operation starts, for boundedRetryer.
func addOpStart(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("ckptfsOperationStart",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			return next.HandleInitialize(context.WithValue(ctx, opStartKey{}, time.Now()), in)
		}), middleware.Before)
}

// boundedRetryer is the SDK's retryer, but no retry is decided once max has
// passed since the operation's first attempt. The failed attempt's error
// stays the operation's error (the SDK joins the refusal to it).
type boundedRetryer struct {
	aws.RetryerV2
	max time.Duration
}

// IsErrorRetryable: as the SDK's, except that a certificate the client does
// not trust is no passing fault (the SDK retries it as a connection error),
// so it fails at once instead of after MaxAttempts attempts.
func (r *boundedRetryer) IsErrorRetryable(err error) bool {
	if kind, _ := classifyCert(err); kind != nil {
		return false
	}
	return r.RetryerV2.IsErrorRetryable(err)
}

func (r *boundedRetryer) GetRetryToken(ctx context.Context, opErr error) (func(error) error, error) {
	if start, ok := ctx.Value(opStartKey{}).(time.Time); ok {
		if elapsed := time.Since(start); elapsed >= r.max {
			return nil, fmt.Errorf("no retry after %s (retry max time %s)", elapsed.Round(time.Millisecond), r.max)
		}
	}
	return r.RetryerV2.GetRetryToken(ctx, opErr)
}
