package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/ckptfs/ckptfs/fs/inspect"
)

// catMain is "ckptfs cat [--cno N] [--offset N] [--length N] STORE PATH": it
// writes the file (as of checkpoint N) to stdout, reading only the objects the
// range needs.
func catMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ckptfs cat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf toolFlags
	tf.register(fs)
	cno := fs.Uint64("cno", 0, "checkpoint to read (default: the latest)")
	off := fs.Int64("offset", 0, "first byte")
	n := fs.Int64("length", -1, "bytes to read (default: to the end)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 2 || *off < 0 {
		fmt.Fprintln(stderr, "usage: ckptfs cat [-o name=value,...] [--cno N] [--offset N] [--length N] STORE PATH")
		return 2
	}
	ctx, cancel := toolContext()
	defer cancel()
	v, err := tf.openVolume(ctx, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs cat: %v\n", err)
		return 1
	}
	return catRun(ctx, v, fs.Arg(1), *cno, *off, *n, stdout, stderr)
}

func catRun(ctx context.Context, v *inspect.Volume, path string, cno uint64, off, n int64, stdout, stderr io.Writer) int {
	pr := newProgress(stderr, "cat "+path)
	if n > 0 {
		pr.SetTotal(n)
	}
	var last int64
	err := v.Cat(ctx, stdout, path, cno, off, n, func(done int64) { pr.Add(done - last); last = done })
	pr.Done()
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs cat: %v\n", err)
		return 1
	}
	return 0
}
