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
}

// linkListener counts the connections it accepts and paces them by the
// link of the proxy's rule when they are accepted.
type linkListener struct {
	net.Listener
	p *Proxy
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
	return &linkConn{Conn: c, link: *link, closing: l.p.closing}, nil
}

// linkConn is one client connection over a Link.
type linkConn struct {
	net.Conn
	link    Link
	closing <-chan struct{}

	shook        sync.Once
	rmu, wmu     sync.Mutex
	rnext, wnext time.Time // when each direction is free again (GUARDED_BY rmu, wmu)
}

// paceChunk is the most written at once on a capped link, so that an
// answer flows instead of coming in one late burst.
const paceChunk = 16 << 10

func (c *linkConn) Read(b []byte) (int, error) {
	c.shook.Do(func() { c.wait(c.link.Handshake) })
	n, err := c.Conn.Read(b)
	if n > 0 && c.link.Bandwidth > 0 {
		c.rmu.Lock()
		c.wait(c.pace(&c.rnext, n))
		c.rmu.Unlock()
	}
	return n, err
}

func (c *linkConn) Write(b []byte) (int, error) {
	if c.link.Bandwidth <= 0 {
		return c.Conn.Write(b)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var done int
	for done < len(b) {
		chunk := b[done:min(len(b), done+paceChunk)]
		c.wait(c.pace(&c.wnext, len(chunk)))
		n, err := c.Conn.Write(chunk)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// pace books n bytes on a direction free again at *next and returns how
// long to wait until they have passed. Idle time earns no burst.
func (c *linkConn) pace(next *time.Time, n int) time.Duration {
	now := time.Now()
	if next.Before(now) {
		*next = now
	}
	*next = next.Add(time.Duration(int64(n) * int64(time.Second) / c.link.Bandwidth))
	return time.Until(*next)
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
