package faultproxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// backend is a server that echoes the request body and counts requests,
// and says which Host it was asked for.
func backend(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Host", r.Host)
		w.Header().Set("X-Path", r.URL.RequestURI())
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func start(t *testing.T, target string, r Rule) *Proxy {
	t.Helper()
	p, err := Start(target, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func client() *http.Client {
	// No retries, no keep-alive surprises: each request is one attempt.
	return &http.Client{Transport: &http.Transport{Proxy: nil}}
}

func TestForwardsAsItCame(t *testing.T) {
	srv, n := backend(t)
	p := start(t, srv.URL, Rule{})
	body := bytes.Repeat([]byte("abc"), 100000)
	resp, err := client().Post(p.URL()+"/bucket/key?partNumber=3&uploadId=x", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !bytes.Equal(got, body) {
		t.Fatalf("status %d, %d bytes back, want 200 and the %d sent", resp.StatusCode, len(got), len(body))
	}
	if h := resp.Header.Get("X-Host"); h != p.URL()[len("http://"):] {
		t.Errorf("the server was asked for host %q, want the proxy's %q (signatures cover it)", h, p.URL())
	}
	if path := resp.Header.Get("X-Path"); path != "/bucket/key?partNumber=3&uploadId=x" {
		t.Errorf("path %q", path)
	}
	if n.Load() != 1 {
		t.Errorf("server saw %d requests", n.Load())
	}
	c := p.Counters()
	if c.Requests != 1 || c.Forwarded != 1 || c.Faults() != 0 {
		t.Errorf("counters: %v", c)
	}
}

func TestErrorsAreNotForwarded(t *testing.T) {
	srv, n := backend(t)
	for _, tc := range []struct {
		rule   Rule
		status int
	}{{Rule{Error503: 1}, 503}, {Rule{Error500: 1}, 500}} {
		p := start(t, srv.URL, tc.rule)
		resp, err := client().Get(p.URL() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !bytes.Contains(b, []byte("<Code>")) {
			t.Errorf("rule %+v: status %d body %q", tc.rule, resp.StatusCode, b)
		}
	}
	if n.Load() != 0 {
		t.Errorf("the server saw %d requests, want none", n.Load())
	}
}

// TestLoseAnswer: the server carries the request out, the client gets no
// answer.
func TestLoseAnswer(t *testing.T) {
	srv, n := backend(t)
	var events []Event
	var mu sync.Mutex
	p := start(t, srv.URL, Rule{LoseAnswer: 1, OnFault: func(e Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
	resp, err := client().Post(p.URL()+"/x", "text/plain", bytes.NewReader([]byte("hello")))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got an answer (%d), want the connection dropped", resp.StatusCode)
	}
	if n.Load() != 1 {
		t.Errorf("the server saw %d requests, want the one forwarded", n.Load())
	}
	if c := p.Counters(); c.Lost != 1 || c.Forwarded != 1 {
		t.Errorf("counters: %v", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 1 || events[0].Fault != "lost" || events[0].Method != "POST" || events[0].Path != "/x" {
		t.Errorf("events: %+v", events)
	}
}

func TestDelayAnswers(t *testing.T) {
	srv, n := backend(t)
	p := start(t, srv.URL, Rule{Delay: 1, MaxDelay: time.Millisecond})
	for range 20 {
		resp, err := client().Get(p.URL() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if c := p.Counters(); c.Delayed != 20 || n.Load() != 20 {
		t.Errorf("counters %v, server saw %d", c, n.Load())
	}
}

// TestSeededRule: the same seed draws the same faults in the same order,
// and the rates are about right.
func TestSeededRule(t *testing.T) {
	r := Rule{Seed: 7, Error503: 0.1, Error500: 0.1, Delay: 0.1, MaxDelay: time.Second, LoseAnswer: 0.1}
	draws := func() []fault {
		p := &Proxy{}
		p.setRule(r)
		var out []fault
		for range 10000 {
			f, _, _, _ := p.draw(&http.Request{})
			out = append(out, f)
		}
		return out
	}
	a, b := draws(), draws()
	counts := map[fault]int{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs with the same seed", i)
		}
		counts[a[i]]++
	}
	for _, f := range []fault{err503, err500, loseAnswer} {
		if c := counts[f]; c < 800 || c > 1200 {
			t.Errorf("fault %d drawn %d times in 10000, want about 1000", f, c)
		}
	}
	if c := counts[delayBefore] + counts[delayAfter]; c < 800 || c > 1200 {
		t.Errorf("delays drawn %d times in 10000, want about 1000", c)
	}
}

// TestStall: requests wait while stalled and go on when released; Close
// releases them too.
func TestStall(t *testing.T) {
	srv, n := backend(t)
	p := start(t, srv.URL, Rule{})
	p.Stall(true)
	var wg sync.WaitGroup
	codes := make(chan int, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client().Get(p.URL() + "/x")
			if err != nil {
				codes <- -1
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	for p.Counters().Stalled < 3 {
		time.Sleep(time.Millisecond)
	}
	if in := p.InFlight(); len(in) != 3 || in[0].Stage != "stalled" || in[0].Path != "/x" {
		t.Errorf("in flight while stalled: %+v", in)
	}
	if n.Load() != 0 {
		t.Fatalf("the server saw %d requests while stalled", n.Load())
	}
	p.Stall(false)
	wg.Wait()
	if in := p.InFlight(); len(in) != 0 {
		t.Errorf("in flight after the stall: %+v", in)
	}
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("status %d after the stall, want 200", c)
		}
	}

	// Close ends a stall: the client sees its connection go.
	p.Stall(true)
	errc := make(chan error, 1)
	go func() {
		resp, err := client().Get(p.URL() + "/y")
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	for p.Counters().Stalled < 4 {
		time.Sleep(time.Millisecond)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Error("a request stalled when the proxy closed got an answer")
	}
}

func TestStartBadTarget(t *testing.T) {
	for _, target := range []string{"https://x:1", "127.0.0.1:80", "http://"} {
		if p, err := Start(target, Rule{}); err == nil {
			p.Close()
			t.Errorf("Start(%q) accepted it", target)
		}
	}
}

// TestMatch: only the requests Match accepts meet faults.
func TestMatch(t *testing.T) {
	srv, n := backend(t)
	p := start(t, srv.URL, Rule{Error503: 1, Match: func(r *http.Request) bool { return r.Method == http.MethodPut }})
	resp, err := client().Get(p.URL() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET: %d, want it passed", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPut, p.URL()+"/x", bytes.NewReader([]byte("b")))
	resp, err = client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("PUT: %d, want 503", resp.StatusCode)
	}
	if n.Load() != 1 || p.Counters().Error503 != 1 {
		t.Errorf("server saw %d, counters %v", n.Load(), p.Counters())
	}
}
