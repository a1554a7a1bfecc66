package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ckptfs/ckptfs/fs/nsv2"
)

// newFsckCmd is "ckptfs fsck STORE [PATH]". Exit status: 0 all well, 1
// problems found (each printed with the object's key), 2 usage.
func newFsckCmd() *cobra.Command {
	var tf toolFlags
	c := &cobra.Command{
		Use:   "fsck [flags] STORE [PATH]",
		Short: "check the volume (or the files under PATH) against its objects",
		Long: "ckptfs fsck: checks every file of the volume of STORE against the objects in\n" +
			"the bucket, without mounting. With PATH, checks that file, or every file\n" +
			"under that directory, reading only their objects. Each problem is printed\n" +
			"with the object's key; exit status 0: all well, 1: problems found (or no\n" +
			"such PATH).",
		Args:              argsBetween(1, 2, "STORE [PATH]"),
		ValidArgsFunction: storeCompletion,
		RunE: func(c *cobra.Command, args []string) error {
			stdout := c.OutOrStdout()
			ctx, cancel := toolContext()
			defer cancel()
			v, err := tf.openVolume(ctx, args[0])
			if err != nil {
				return err
			}
			pr := newProgress(c.ErrOrStderr(), "fsck: objects")
			r, err := v.Fsck(ctx, argAt(args, 1), func() { pr.Add(1) })
			pr.Done()
			if err != nil {
				return err
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
			if r.Names != nil {
				fmt.Fprintln(stdout, namesLine(r.Names))
			}
			fmt.Fprintf(stdout, "%d files, %d objects, %d problems, %d leftovers\n", r.Files, r.Objects, len(r.Problems), len(r.Leftovers))
			if !r.OK() {
				// The problems are printed above.
				return exitStatus(exitFailed)
			}
			return nil
		},
	}
	tf.register(c)
	return c
}

// namesLine is fsck's summary of a namespace v2 volume's names (ns2/): a
// file of several names counts once in files, and each of its names in
// linked.
func namesLine(n *nsv2.CheckReport) string {
	return fmt.Sprintf("names (ns2/): %d objects, %d files, %d directories, %d others, %d linked names (hard links), %d tombstones, %d locked, %d orphan records",
		n.Objects, n.Files, n.Dirs, n.Others, n.Linked, n.Tombstones, n.Locked, n.Records)
}
