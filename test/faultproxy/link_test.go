package faultproxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// timedGet is the time a GET of url takes with c, its body read whole.
func timedGet(t *testing.T, c *http.Client, url string) (time.Duration, []byte) {
	t.Helper()
	start := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return time.Since(start), body
}

// TestLinkHandshakeOncePerConnection: a new connection pays the handshake
// and the latency, a reused one the latency only.
func TestLinkHandshakeOncePerConnection(t *testing.T) {
	const (
		handshake = 300 * time.Millisecond
		latency   = 50 * time.Millisecond
	)
	srv, _ := backend(t)
	p := start(t, srv.URL, Rule{Link: &Link{Handshake: handshake, Latency: latency}})
	c := client() // keeps its connection between requests
	for i, want := range []struct {
		min, max time.Duration
		conns    int64
	}{
		{handshake + latency, handshake + latency + 250*time.Millisecond, 1},
		{latency, handshake, 1},
		{latency, handshake, 1},
	} {
		took, _ := timedGet(t, c, p.URL()+"/k")
		if took < want.min || took > want.max {
			t.Errorf("request %d took %s, want %s to %s", i, took, want.min, want.max)
		}
		if n := p.Counters().Conns; n != want.conns {
			t.Errorf("after request %d: %d connections, want %d", i, n, want.conns)
		}
	}
	// Another client, another connection: the handshake again.
	if took, _ := timedGet(t, client(), p.URL()+"/k"); took < handshake+latency {
		t.Errorf("a new connection's request took %s, want at least %s", took, handshake+latency)
	}
	if n := p.Counters().Conns; n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// TestLinkBandwidth: an answer takes its size over the bandwidth, each
// connection its own cap; without a link it is much faster.
func TestLinkBandwidth(t *testing.T) {
	const (
		size = 256 << 10
		bw   = 1 << 20 // bytes per second: size takes 250 ms
	)
	payload := bytes.Repeat([]byte{'x'}, size)
	srv := echoSize(t, payload)
	p := start(t, srv.URL, Rule{Link: &Link{Bandwidth: bw}})
	took, body := timedGet(t, client(), p.URL()+"/k")
	if len(body) != size {
		t.Fatalf("got %d bytes, want %d", len(body), size)
	}
	want := time.Duration(size) * time.Second / bw
	if took < want*9/10 || took > want*3 {
		t.Errorf("%d bytes at %d B/s took %s, want about %s", size, bw, took, want)
	}

	p.SetRule(Rule{}) // new connections are not capped
	if took, _ := timedGet(t, client(), p.URL()+"/k"); took > want/2 {
		t.Errorf("%d bytes with no link took %s, want well under %s", size, took, want)
	}
}

// echoSize is a server answering payload to every request.
func echoSize(t *testing.T, payload []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(payload)
	}))
	t.Cleanup(srv.Close)
	return srv
}
