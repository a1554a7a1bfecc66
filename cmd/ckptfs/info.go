package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// infoMain is "ckptfs info [--json] STORE [PATH]": a file's checkpoints and
// objects, or the volume's totals.
func infoMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ckptfs info", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf toolFlags
	tf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() < 1 || fs.NArg() > 2 {
		fmt.Fprintln(stderr, "usage: ckptfs info [-o name=value,...] [--json] STORE [PATH]")
		return 2
	}
	ctx, cancel := toolContext()
	defer cancel()
	v, err := tf.openVolume(ctx, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs info: %v\n", err)
		return 1
	}
	var out any
	if p := fs.Arg(1); p != "" && p != "/" {
		fi, err := v.FileInfo(ctx, p)
		if err != nil {
			fmt.Fprintf(stderr, "ckptfs info: %v\n", err)
			return 1
		}
		out = fi
		if !*asJSON {
			tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintf(tw, "file\t%s\t(id %s)\nsize\t%d\ncheckpoint\t%d\nobjects\t%d\t%d bytes\nlive bytes\t%d\ndead bytes\t%d\ncold read\t%d GETs\t%d requests\n",
				fi.Path, fi.FileID, fi.Size, fi.Cno, fi.Objects, fi.Bytes, fi.LiveBytes, fi.DeadBytes, fi.ColdReadGets, fi.ColdReadRequests)
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
			tw.Flush()
			return 0
		}
	} else {
		si, err := v.StoreInfo(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "ckptfs info: %v\n", err)
			return 1
		}
		out = si
		if !*asJSON {
			tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintf(tw, "files\t%d\ndirectories\t%d\nsymlinks\t%d\ncheckpoints\t%d\nobjects\t%d\nstored bytes\t%d\nfile bytes\t%d\nlive bytes\t%d\ndead bytes\t%d\nopen uploads\t%d\n",
				si.Files, si.Dirs, si.Symlinks, si.Checkpoints, si.Objects, si.Bytes, si.FileBytes, si.LiveBytes, si.DeadBytes, si.Uploads)
			tw.Flush()
			return 0
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(stderr, "ckptfs info: %v\n", err)
		return 1
	}
	return 0
}
