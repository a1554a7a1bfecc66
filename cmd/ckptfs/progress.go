package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress draws a one-line counter for long runs (gc, fsck, cat of a large
// file) when its writer is a terminal, and does nothing otherwise, so that
// scripts and logs stay clean.
type progress struct {
	mu    sync.Mutex
	w     io.Writer // nil when not a terminal: every method is then a no-op
	what  string
	n     int64
	total int64
	last  time.Time
	drawn bool
}

// redrawEvery bounds how often the line is redrawn: a terminal is slow.
const redrawEvery = 200 * time.Millisecond

// newProgress returns a reporter that draws on w only if w is a terminal.
func newProgress(w io.Writer, what string) *progress {
	p := &progress{what: what}
	if isTerminal(w) {
		p.w = w
	}
	return p
}

// isTerminal reports whether w is a character device (a tty).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Add counts n more units done.
func (p *progress) Add(n int64) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += n
	if now := time.Now(); now.Sub(p.last) >= redrawEvery {
		p.last = now
		p.draw()
	}
}

// SetTotal sets the number of units expected (0: unknown).
func (p *progress) SetTotal(n int64) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total = n
}

// Done erases the line, leaving the terminal as it was.
func (p *progress) Done() {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

func (p *progress) draw() {
	if p.total > 0 {
		fmt.Fprintf(p.w, "\r\033[K%s: %d/%d (%d%%)", p.what, p.n, p.total, p.n*100/p.total)
	} else {
		fmt.Fprintf(p.w, "\r\033[K%s: %d", p.what, p.n)
	}
	p.drawn = true
}
