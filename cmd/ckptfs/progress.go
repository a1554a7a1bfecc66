package main

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress draws a one-line bar for long runs (gc, fsck, cat of a large
// file) when its writer is a terminal, and does nothing otherwise, so that
// scripts and logs stay clean. The bar is progressbar's; this type only
// decides whether there is one and keeps the calls nil-safe.
type progress struct {
	mu  sync.Mutex
	bar *progressbar.ProgressBar // nil when not a terminal: every method is then a no-op
}

// redrawEvery bounds how often the line is redrawn: a terminal is slow.
const redrawEvery = 200 * time.Millisecond

// newProgress returns a reporter of a count of things (files, objects)
// that draws on w only if w is a terminal.
func newProgress(w io.Writer, what string) *progress {
	return newProgressOf(w, what, progressbar.OptionShowCount())
}

// newBytesProgress is newProgress for bytes: done and total in human
// sizes (MiB, GiB: the powers of 1024 the options use) and the rate.
func newBytesProgress(w io.Writer, what string) *progress {
	return newProgressOf(w, what, progressbar.OptionShowCount(), progressbar.OptionShowBytes(true), progressbar.OptionShowTotalBytes(true),
		progressbar.OptionUseIECUnits(true))
}

func newProgressOf(w io.Writer, what string, opts ...progressbar.Option) *progress {
	p := &progress{}
	if isTerminal(w) {
		p.bar = progressbar.NewOptions64(-1, // total unknown until SetTotal
			append([]progressbar.Option{
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription(what),
				progressbar.OptionThrottle(redrawEvery),
				progressbar.OptionClearOnFinish(),
				progressbar.OptionSetPredictTime(false),
			}, opts...)...,
		)
	}
	return p
}

// Drawing reports whether there is a bar: what only the bar needs (a
// total that costs a request) is worth getting.
func (p *progress) Drawing() bool { return p != nil && p.bar != nil }

// isTerminal reports whether w is a terminal (not merely a character
// device: /dev/null is one too).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Add counts n more units done.
func (p *progress) Add(n int64) {
	if p == nil || p.bar == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.bar.Add64(n) // a terminal that stopped taking output only loses the bar
}

// SetTotal sets the number of units expected (0: unknown).
func (p *progress) SetTotal(n int64) {
	if p == nil || p.bar == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n <= 0 {
		n = -1
	}
	p.bar.ChangeMax64(n)
}

// Done erases the line, leaving the terminal as it was.
func (p *progress) Done() {
	if p == nil || p.bar == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.bar.Clear()
	_ = p.bar.Exit()
}
