// Package faultproxy is an HTTP reverse proxy on loopback that stands
// between a client (a ckptfs mount, `ckptfs gc`) and an S3 server and
// injects faults by a seeded random rule: error answers (503 SlowDown, 500
// InternalError) without forwarding, delays before forwarding or after the
// answer, and lost answers (the request is forwarded and carried out by the
// server, then the connection is dropped without a reply). Stall holds every
// request until it is released, to emulate an outage. A Link makes it a far
// and narrow path besides: a handshake cost per new connection, a latency
// per request, a bandwidth per connection and one shared by all of them,
// over real TCP.
//
// The proxy forwards each request as it came: method, path, query, headers
// and the Host header, so that SigV4 signatures made for the proxy's address
// still verify at the server. It is test infrastructure: one proxy per test,
// counters for the report, nothing persisted.
package faultproxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Rule says how often each fault happens. Rates are fractions of requests
// (0.02 is 2 %); they are drawn in this order from one number per request,
// so their sum should stay below 1.
type Rule struct {
	Seed uint64
	// Error503 answers 503 SlowDown without forwarding.
	Error503 float64
	// Error500 answers 500 InternalError without forwarding.
	Error500 float64
	// Delay holds the request for a random time up to MaxDelay, before
	// forwarding it or after the server answered (half each).
	Delay    float64
	MaxDelay time.Duration
	// LoseAnswer forwards the request, reads the server's whole answer and
	// then closes the client's connection without sending it.
	LoseAnswer float64
	// Match, when set, limits faults to the requests it accepts (a method
	// and key, say, for a test that aims at one request); the others pass.
	Match func(*http.Request) bool
	// OnFault, when set, is told of each request that met a fault, after
	// the fault (it must not block for long).
	OnFault func(Event)
	// Link, when set, applies to every request and connection, Match or
	// not; a connection keeps the link it was accepted with.
	Link *Link
}

// Event is one fault met by one request.
type Event struct {
	Time   time.Time // when the request came
	Method string
	Path   string // path and query, as the client sent them
	Fault  string // "503", "500", "delay-before", "delay-after", "lost"
	Delay  time.Duration
}

// Request is a request the proxy is serving now.
type Request struct {
	Method, Path string
	Since        time.Time
	Stage        string // "on the link", "stalled", "delaying", "at the server", "answering"
}

// InFlight lists the requests being served, oldest first: after a hang it
// tells whether the server or the client is waiting.
func (p *Proxy) InFlight() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Request, 0, len(p.inflight))
	for _, r := range p.inflight {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out
}

// Counters are what a proxy did since it started.
type Counters struct {
	Conns     int64 // client connections accepted
	Ended     int64 // client connections ended: closed by the client, or by a lost answer
	Requests  int64 // requests received
	Forwarded int64 // requests sent to the server (lost answers included)
	Error503  int64
	Error500  int64
	Delayed   int64
	Lost      int64 // answers dropped after the server carried out the request
	Stalled   int64 // requests held by Stall
	Failed    int64 // requests the server could not be reached for (502)
	Gone      int64 // requests whose client went away before the answer
}

// Faults is the number of requests that met a fault (delays included).
func (c Counters) Faults() int64 { return c.Error503 + c.Error500 + c.Delayed + c.Lost }

func (c Counters) String() string {
	return fmt.Sprintf("%d connections (%d ended), %d requests: %d forwarded, %d answered 503, %d answered 500, %d delayed, %d answers lost, %d stalled, %d unreachable, %d clients gone",
		c.Conns, c.Ended, c.Requests, c.Forwarded, c.Error503, c.Error500, c.Delayed, c.Lost, c.Stalled, c.Failed, c.Gone)
}

// Proxy is a running fault-injecting proxy.
type Proxy struct {
	target *url.URL
	ln     net.Listener
	srv    *http.Server
	tr     *http.Transport
	served chan struct{} // closed when Serve returned

	mu    sync.Mutex
	rule  Rule       // GUARDED_BY(mu)
	rng   *rand.Rand // GUARDED_BY(mu)
	stall chan struct{}
	// inflight: the requests being served, by a number of their own.
	inflight map[uint64]*Request // GUARDED_BY(mu)
	nextReq  uint64              // GUARDED_BY(mu)

	// closing is closed by Close: it releases stalled requests and cuts
	// delays short.
	closing   chan struct{}
	closeOnce sync.Once
	handlers  sync.WaitGroup // requests being served, waited for by Close

	conns, ended, requests, forwarded, e503, e500, delayed, lost, stalled, failed, gone atomic.Int64
}

// Start starts a proxy on 127.0.0.1 (a free port) to target, an http URL
// such as "http://127.0.0.1:7070", with rule.
func Start(target string, rule Rule) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy target %q: %w", target, err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("faultproxy target %q: want http://host:port", target)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy listen: %w", err)
	}
	ln := &linkListener{Listener: tcp}
	p := &Proxy{
		target: u,
		ln:     ln,
		tr: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		},
		served:  make(chan struct{}),
		closing: make(chan struct{}),
	}
	ln.p = p
	p.setRule(rule)
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: time.Minute, ConnState: func(_ net.Conn, st http.ConnState) {
		// A hijacked connection is a lost answer's, closed at once.
		if st == http.StateClosed || st == http.StateHijacked {
			p.ended.Add(1)
		}
	}}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return p, nil
}

// URL is the proxy's address, for a client's endpoint.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// SetRule replaces the rule; requests already being served keep theirs.
func (p *Proxy) SetRule(r Rule) { p.setRule(r) }

func (p *Proxy) setRule(r Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rule = r
	p.rng = rand.New(rand.NewPCG(r.Seed, r.Seed^0x9e3779b97f4a7c15))
}

// Stall makes every request wait, before it is forwarded, until Stall(false)
// or Close; requests waiting when stalling stops go on.
func (p *Proxy) Stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.stall == nil:
		p.stall = make(chan struct{})
	case !on && p.stall != nil:
		close(p.stall)
		p.stall = nil
	}
}

// Counters returns what the proxy did so far.
func (p *Proxy) Counters() Counters {
	return Counters{
		Conns: p.conns.Load(), Ended: p.ended.Load(), Requests: p.requests.Load(), Forwarded: p.forwarded.Load(),
		Error503: p.e503.Load(), Error500: p.e500.Load(), Delayed: p.delayed.Load(),
		Lost: p.lost.Load(), Stalled: p.stalled.Load(), Failed: p.failed.Load(), Gone: p.gone.Load(),
	}
}

// Close stops the proxy: it stops listening, closes every connection,
// releases stalled requests (without an answer) and waits for the requests
// being served.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		// Connections first, so that a request released below gets no
		// answer.
		err = p.srv.Close()
		close(p.closing)
		<-p.served
		p.handlers.Wait()
		p.tr.CloseIdleConnections()
	})
	if err != nil {
		return fmt.Errorf("faultproxy close: %w", err)
	}
	return nil
}

// fault is what happens to one request.
type fault int

const (
	none fault = iota
	err503
	err500
	delayBefore
	delayAfter
	loseAnswer
)

// latency is the link's latency of a request, 0 without a link.
func (p *Proxy) latency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rule.Link == nil {
		return 0
	}
	return p.rule.Link.Latency
}

// draw picks the fault of the next request, and a delay.
func (p *Proxy) draw(req *http.Request) (fault, time.Duration, chan struct{}, func(Event)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.rule
	if r.Match != nil && !r.Match(req) {
		return none, 0, p.stall, nil
	}
	x := p.rng.Float64()
	var d time.Duration
	if r.MaxDelay > 0 {
		d = time.Duration(p.rng.Int64N(int64(r.MaxDelay)) + 1)
	}
	f := none
	switch {
	case x < r.Error503:
		f = err503
	case x < r.Error503+r.Error500:
		f = err500
	case x < r.Error503+r.Error500+r.Delay:
		f = delayBefore
		if p.rng.IntN(2) == 1 {
			f = delayAfter
		}
	case x < r.Error503+r.Error500+r.Delay+r.LoseAnswer:
		f = loseAnswer
	}
	return f, d, p.stall, r.OnFault
}

// sleep waits d, or less when the proxy closes or the client goes.
func (p *Proxy) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-p.closing:
	}
}

// hopHeaders are not forwarded (RFC 9110, 7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.handlers.Add(1)
	defer p.handlers.Done()
	p.requests.Add(1)
	f, d, stall, onFault := p.draw(r)
	came := time.Now()
	stage := p.track(r, came)
	defer stage("")
	tell := func(name string, d time.Duration) {
		if onFault != nil {
			onFault(Event{Time: came, Method: r.Method, Path: r.URL.RequestURI(), Fault: name, Delay: d})
		}
	}
	if lat := p.latency(); lat > 0 {
		stage("on the link")
		p.sleep(r.Context(), lat)
	}
	if stall != nil {
		stage("stalled")
		p.stalled.Add(1)
		select {
		case <-stall:
		case <-r.Context().Done():
			return
		case <-p.closing:
			return
		}
	}
	switch f {
	case err503:
		p.e503.Add(1)
		tell("503", 0)
		drain(r)
		writeError(w, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
		return
	case err500:
		p.e500.Add(1)
		tell("500", 0)
		drain(r)
		writeError(w, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.")
		return
	case delayBefore:
		stage("delaying")
		p.delayed.Add(1)
		p.sleep(r.Context(), d)
		tell("delay-before", d)
	}

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme = p.target.Scheme
	out.URL.Host = p.target.Host
	out.Host = r.Host // the signature covers it
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	p.forwarded.Add(1)
	stage("at the server")
	resp, err := p.tr.RoundTrip(out)
	stage("answering")
	if err != nil {
		if r.Context().Err() != nil {
			p.gone.Add(1)
			return
		}
		p.failed.Add(1)
		writeError(w, http.StatusBadGateway, "BadGateway", err.Error())
		return
	}
	defer resp.Body.Close()

	if f == loseAnswer {
		// The server carried the request out; read its answer whole so that
		// it is done, then drop the client's connection without a word.
		_, _ = io.Copy(io.Discard, resp.Body)
		p.lost.Add(1)
		tell("lost", 0)
		hijackAndClose(w)
		return
	}
	if f == delayAfter {
		p.delayed.Add(1)
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			hijackAndClose(w)
			return
		}
		p.sleep(r.Context(), d)
		tell("delay-after", d)
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
		return
	}
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// track records r as in flight; the function it returns sets its stage,
// and "" ends it.
func (p *Proxy) track(r *http.Request, came time.Time) func(string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflight == nil {
		p.inflight = map[uint64]*Request{}
	}
	p.nextReq++
	id := p.nextReq
	p.inflight[id] = &Request{Method: r.Method, Path: r.URL.RequestURI(), Since: came, Stage: "received"}
	return func(stage string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if stage == "" {
			delete(p.inflight, id)
		} else if e := p.inflight[id]; e != nil {
			e.Stage = stage
		}
	}
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		if k == "Connection" || k == "Keep-Alive" || k == "Transfer-Encoding" {
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
}

// drain reads a request body the proxy answers without forwarding, so that
// the connection can be reused.
func drain(r *http.Request) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
	}
}

// writeError answers in the S3 error format, which the SDK retries on 500
// and 503.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	msg = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(msg)
	_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, msg)
}

// hijackAndClose closes the client's connection without an answer.
func hijackAndClose(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the handler, which resets the stream.
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(interface{ SetLinger(int) error }); ok {
		_ = tc.SetLinger(0) // a reset, as a dropped link looks to the client
	}
	_ = conn.Close()
}
