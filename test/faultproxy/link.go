package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Link makes the proxy a network path with a distance and a width, over
// the real TCP connections between the client and the proxy, so that what
// a connection costs shows: a new connection pays Handshake once, a reused
// one does not.
type Link struct {
	// Handshake delays the first byte the proxy reads from each new client
	// connection: what the TCP handshake and TLS's take on a real path
	// (3 round trips with TLS 1.2, 2 with TLS 1.3).
	Handshake time.Duration
	// Latency holds every request before it is forwarded: the round trip
	// of a request and its answer.
	Latency time.Duration
	// Bandwidth caps each client connection, each way, in bytes per
	// second; 0 is no cap.
	Bandwidth int64
	// TotalBandwidth caps all the proxy's client connections together,
	// each way, in bytes per second; 0 is no cap. A real path's width is
	// shared: a client with 16 requests in flight on 16 connections gets
	// no more of it than one with a single connection. Connections take
	// turns chunk by chunk (paceChunk). A connection books at the
	// TotalBandwidth it was accepted with, on the one clock of the proxy.
	TotalBandwidth int64
}

// linkListener counts the connections it accepts and paces them by the
// link of the proxy's rule when they are accepted. One proxy has one: its
// clocks are the proxy's width shared by every connection.
type linkListener struct {
	net.Listener
	p *Proxy

	// in paces what every connection reads from its client, out what
	// they write to it, by Link.TotalBandwidth.
	in, out pacer
}

func (l *linkListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.p.conns.Add(1)
	l.p.mu.Lock()
	link := l.p.rule.Link
	l.p.mu.Unlock()
	if link == nil || *link == (Link{}) {
		return c, nil
	}
	return &linkConn{Conn: c, link: *link, closing: l.p.closing, in: &l.in, out: &l.out}, nil
}

// pacer is one direction of a width: a virtual clock of when it is free
// again. Booking n bytes moves it on by n over the rate.
type pacer struct {
	mu   sync.Mutex
	next time.Time // GUARDED_BY(mu)
}

// paceCatchUp is how far behind now a clock may be left. A sender wakes
// late from its sleep (the runtime sleeps a whole millisecond for less,
// when it has nothing else to run, and longer on a busy machine), and a
// clock that started again at now after each late wake lost that time: a
// connection capped at 150 MB/s carried 10 MB/s so, in 16 KiB chunks. A
// real path's buffers absorb such hiccups. The cost: an idle clock lets
// paceCatchUp's worth of bytes go at once.
const paceCatchUp = 5 * time.Millisecond

// book books n bytes at bps bytes per second and returns when they will
// have passed.
func (p *pacer) book(n int, bps int64) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if floor := time.Now().Add(-paceCatchUp); p.next.Before(floor) {
		p.next = floor
	}
	p.next = p.next.Add(time.Duration(int64(n) * int64(time.Second) / bps))
	return p.next
}

// linkConn is one client connection over a Link.
type linkConn struct {
	net.Conn
	link    Link
	closing <-chan struct{}
	in, out *pacer // the proxy's, shared by its connections

	shook    sync.Once
	rmu, wmu sync.Mutex // one read, one write paced at a time
	rown     pacer      // this connection's own width, each way
	wown     pacer
}

// paceChunk is the most written at once on a capped link, so that an
// answer flows instead of coming in one late burst.
const paceChunk = 16 << 10

// capped reports whether the link caps a width.
func (c *linkConn) capped() bool { return c.link.Bandwidth > 0 || c.link.TotalBandwidth > 0 }

// book books n bytes on this connection's own width and on the proxy's
// total and returns when both let them have passed.
func (c *linkConn) book(own, total *pacer, n int) time.Time {
	var at time.Time
	if c.link.Bandwidth > 0 {
		at = own.book(n, c.link.Bandwidth)
	}
	if c.link.TotalBandwidth > 0 {
		if t := total.book(n, c.link.TotalBandwidth); t.After(at) {
			at = t
		}
	}
	return at
}

func (c *linkConn) Read(b []byte) (int, error) {
	c.shook.Do(func() { c.wait(c.link.Handshake) })
	n, err := c.Conn.Read(b)
	if n > 0 && c.capped() {
		c.rmu.Lock()
		c.wait(time.Until(c.book(&c.rown, c.in, n)))
		c.rmu.Unlock()
	}
	return n, err
}

func (c *linkConn) Write(b []byte) (int, error) {
	if !c.capped() {
		return c.Conn.Write(b)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var done int
	for done < len(b) {
		chunk := b[done:min(len(b), done+paceChunk)]
		c.wait(time.Until(c.book(&c.wown, c.out, len(chunk))))
		n, err := c.Conn.Write(chunk)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// wait sleeps d, less when the proxy closes.
func (c *linkConn) wait(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.closing:
	}
}

// SetLinger lets hijackAndClose reset the connection.
func (c *linkConn) SetLinger(sec int) error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		return tc.SetLinger(sec)
	}
	return nil
}
