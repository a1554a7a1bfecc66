package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// newInfoCmd is "ckptfs info [--json] STORE [PATH]": a file's checkpoints
// and objects, or the volume's totals.
func newInfoCmd() *cobra.Command {
	var tf toolFlags
	var asJSON bool
	c := &cobra.Command{
		Use:   "info [flags] STORE [PATH]",
		Short: "show a file's checkpoints and objects, or the volume's totals",
		Long: "ckptfs info: shows the checkpoints and objects of the file PATH of the volume of\n" +
			"STORE, or without PATH (or with /) the volume's totals, read from the bucket\n" +
			"without mounting.",
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
			var out any
			if p := argAt(args, 1); p != "" && p != "/" {
				fi, err := v.FileInfo(ctx, p)
				if err != nil {
					return err
				}
				out = fi
				if !asJSON {
					tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
					fmt.Fprintf(tw, "file\t%s\t(id %s)\nsize\t%d\ncheckpoint\t%d\nobjects\t%d\t%d bytes\nlive bytes\t%d\ndead bytes\t%d\ncold read\t%d GETs\t%d requests\n",
						fi.Path, fi.FileID, fi.Size, fi.Cno, fi.Objects, fi.Bytes, fi.LiveBytes, fi.DeadBytes, fi.ColdReadGets, fi.ColdReadRequests)
					if fi.MappedKnown {
						fmt.Fprintf(tw, "mapped bytes\t%d\t(the latest checkpoint's blocks, holes excluded)\n", fi.MappedBytes)
					}
					for _, u := range fi.Uploads {
						fmt.Fprintf(tw, "open upload\t%s\n", u)
					}
					if fi.WALRecords > 0 {
						fmt.Fprintf(tw, "wal records\t%d\t%d bytes\n", fi.WALRecords, fi.WALBytes)
					}
					fmt.Fprintf(tw, "\nCNO\tTIME\tSIZE\tFORMAT\tPUBLISHED\tOBJECT\tBYTES\tLIVE\tDEAD\n")
					for _, c := range fi.Checkpoints {
						fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%v\t\t%d\t\t\n", c.Cno, c.Time.UTC().Format(time.RFC3339), c.Size, c.Format, c.Published, c.Bytes)
						for _, o := range c.Objects {
							fmt.Fprintf(tw, "\t\t\t%s\t\t%s\t%d\t%d\t%d\n", o.Format, o.Key, o.Size, o.LiveBytes, o.DeadBytes)
						}
					}
					return tw.Flush()
				}
			} else {
				si, err := v.StoreInfo(ctx)
				if err != nil {
					return err
				}
				out = si
				if !asJSON {
					tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
					fmt.Fprintf(tw, "files\t%d\ndirectories\t%d\nsymlinks\t%d\ncheckpoints\t%d\nobjects\t%d\nstored bytes\t%d\nfile bytes\t%d\nlive bytes\t%d\ndead bytes\t%d\nopen uploads\t%d\n",
						si.Files, si.Dirs, si.Symlinks, si.Checkpoints, si.Objects, si.Bytes, si.FileBytes, si.LiveBytes, si.DeadBytes, si.Uploads)
					return tw.Flush()
				}
			}
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		},
	}
	tf.register(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
