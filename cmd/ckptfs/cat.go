package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/ckptfs/ckptfs/fs/inspect"
)

// newCatCmd is "ckptfs cat [--cno N] [--offset N] [--length N] STORE PATH":
// it writes the file (as of checkpoint N) to stdout, reading only the
// objects the range needs.
func newCatCmd() *cobra.Command {
	var tf toolFlags
	var cno uint64
	var off, n int64
	c := &cobra.Command{
		Use:   "cat [flags] STORE PATH",
		Short: "write a file of the volume (as of a checkpoint) to stdout",
		Long: "ckptfs cat: writes the file PATH of the volume of STORE, as of its latest\n" +
			"checkpoint or of --cno, to stdout, reading only the objects the range needs.\n" +
			"When stderr is a terminal, a bar there shows the bytes written of the total.",
		Args:              argsBetween(2, 2, "STORE and PATH"),
		ValidArgsFunction: storeCompletion,
		RunE: func(c *cobra.Command, args []string) error {
			if off < 0 {
				return usagef("--offset %d: want a number >= 0", off)
			}
			ctx, cancel := toolContext()
			defer cancel()
			v, err := tf.openVolume(ctx, args[0])
			if err != nil {
				return err
			}
			return catRun(ctx, v, args[1], cno, off, n, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	tf.register(c)
	c.Flags().Uint64Var(&cno, "cno", 0, "checkpoint `N` to read (default: the latest)")
	c.Flags().Int64Var(&off, "offset", 0, "read from byte `N`")
	c.Flags().Int64Var(&n, "length", -1, "read `N` bytes (default: to the end)")
	return c
}

// catRun writes the range to stdout, with a bar on stderr when it is a
// terminal: bytes written of the total, in human sizes.
func catRun(ctx context.Context, v *inspect.Volume, path string, cno uint64, off, n int64, stdout, stderr io.Writer) error {
	pr := newBytesProgress(stderr, "cat "+path)
	if pr.Drawing() {
		pr.SetTotal(catTotal(ctx, v, path, cno, off, n))
	}
	var last int64
	err := v.Cat(ctx, stdout, path, cno, off, n, func(done int64) { pr.Add(done - last); last = done })
	pr.Done()
	return err
}

// catTotal is the number of bytes cat will write, for the bar: the range
// asked for, bounded by the size the file's head records (one small GET).
// As of --cno N the size is that checkpoint's, which the head does not
// give: the total is then known only with --length. 0 is unknown.
func catTotal(ctx context.Context, v *inspect.Volume, path string, cno uint64, off, n int64) int64 {
	if cno != 0 {
		return max(n, 0)
	}
	es, err := v.List(ctx, path)
	if err != nil || len(es) != 1 {
		return max(n, 0) // Cat reports what is wrong with the file
	}
	total := max(es[0].Size-off, 0)
	if n >= 0 {
		total = min(total, n)
	}
	return total
}
