package main

import (
	"bytes"
	"os"
	"testing"
)

// Progress is drawn on terminals only: not into a pipe, a buffer or
// /dev/null (a character device, but no terminal).
func TestProgressNotATerminal(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var buf bytes.Buffer
	for name, out := range map[string]interface{ Write([]byte) (int, error) }{"buffer": &buf, "pipe": w, "/dev/null": devnull} {
		p := newProgress(out, "test")
		if p.bar != nil {
			t.Errorf("%s: a progress bar on something that is not a terminal", name)
		}
		p.SetTotal(10)
		p.Add(5)
		p.Done()
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %q into a buffer", buf.String())
	}
	var nilp *progress
	nilp.Add(1) // nil-safe
}
