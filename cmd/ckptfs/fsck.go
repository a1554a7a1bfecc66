package main

import (
	"flag"
	"fmt"
	"io"
)

// fsckMain is "ckptfs fsck STORE [PATH]". Exit status: 0 all well, 1
// problems found (each printed with the object's key), 2 usage.
func fsckMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ckptfs fsck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf toolFlags
	tf.register(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() < 1 || fs.NArg() > 2 {
		fmt.Fprintln(stderr, "usage: ckptfs fsck [-o name=value,...] STORE [PATH]")
		return 2
	}
	ctx, cancel := toolContext()
	defer cancel()
	v, err := tf.openVolume(ctx, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs fsck: %v\n", err)
		return 1
	}
	pr := newProgress(stderr, "fsck: objects")
	r, err := v.Fsck(ctx, fs.Arg(1), func() { pr.Add(1) })
	pr.Done()
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs fsck: %v\n", err)
		return 1
	}
	for _, p := range r.Problems {
		fmt.Fprintf(stdout, "problem: %s\n", p)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	for _, u := range r.Leftovers {
		fmt.Fprintf(stdout, "leftover: %s (multipart upload %s started %s; the cleaner removes it)\n", u.Key, u.UploadID, u.Initiated.UTC().Format("2006-01-02T15:04:05Z"))
	}
	fmt.Fprintf(stdout, "%d files, %d objects, %d problems, %d leftovers\n", r.Files, r.Objects, len(r.Problems), len(r.Leftovers))
	if !r.OK() {
		return 1
	}
	return 0
}
