package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ckptfs/ckptfs/fs/cleaner"
)

const gcUsage = `Usage: ckptfs gc [-o name=value,...] [--keep N] [--keep-for DURATION]
                 [--grace DURATION] [--min-age DURATION] [--dry-run] STORE

Deletes the objects no retained checkpoint references, failed flushes' and
abandoned writers' leftovers, files left without a name (older than the grace
period), and multipart uploads abandoned for longer than the grace period.
Never deletes anything a live writer may still publish: a writer keeps a
renewed marker (f/<id>/writers/) naming what it may publish, whatever its age.

  --keep N            retain the newest N checkpoints of each file (default 0: all)
  --keep-for D        also retain checkpoints younger than D (e.g. 24h)
  --grace D           age before work above a file's head that no live writer
                      marker covers (a dead writer's objects sent ahead or
                      unfinished flush, multipart uploads) counts as abandoned,
                      and how long a dead marker is kept (default 1h); must
                      exceed the time of one request
  --min-age D         age before an unreferenced finished object is deleted;
                      covers readers of other mounts with a stale head (default 10m)
  --dry-run           delete nothing; print what would be deleted
  -o ...              store options, as for mount (endpoint=, region=, path_style, profile=)
`

// defaultMinAge covers another mount's writer whose view of the head is a
// little old; see package cleaner.
const defaultMinAge = 10 * time.Minute

// gcMain runs `ckptfs gc`; args follow "gc".
func gcMain(args []string, stdout, stderr io.Writer) int {
	o := cleaner.Options{Grace: cleaner.DefaultGrace, MinAge: defaultMinAge}
	var opts, pos []string
	fail := func(err error) int {
		fmt.Fprintf(stderr, "ckptfs gc: %v\n%s", err, gcUsage)
		return 2
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, has := strings.Cut(a, "=")
		needValue := func() (string, error) {
			if has {
				return value, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		duration := func(dst *time.Duration) error {
			v, err := needValue()
			if err != nil {
				return err
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("%s %q: want a duration such as 30m or 24h", name, v)
			}
			*dst = d
			return nil
		}
		var err error
		switch {
		case a == "-h" || a == "--help":
			fmt.Fprint(stdout, gcUsage)
			return 0
		case a == "--dry-run" || a == "-n":
			o.DryRun = true
		case name == "--keep":
			var v string
			if v, err = needValue(); err == nil {
				n, perr := strconv.Atoi(v)
				if perr != nil || n < 0 {
					err = fmt.Errorf("--keep %q: want a number >= 0", v)
				}
				o.Keep = n
			}
		case name == "--keep-for":
			err = duration(&o.KeepFor)
		case name == "--grace":
			err = duration(&o.Grace)
		case name == "--min-age":
			err = duration(&o.MinAge)
		case a == "-o":
			if i+1 >= len(args) {
				err = fmt.Errorf("-o needs a value")
				break
			}
			i++
			opts = splitOpts(opts, args[i])
		case strings.HasPrefix(a, "-o"):
			opts = splitOpts(opts, a[2:])
		case strings.HasPrefix(a, "-") && len(a) > 1:
			err = fmt.Errorf("unknown flag %s", a)
		default:
			pos = append(pos, a)
		}
		if err != nil {
			return fail(err)
		}
	}
	if len(pos) != 1 {
		return fail(fmt.Errorf("want STORE, got %d arguments", len(pos)))
	}
	so, rest, err := takeStoreOpts(opts)
	if err != nil {
		return fail(err)
	}
	if len(rest) > 0 {
		return fail(fmt.Errorf("unknown options: %s", strings.Join(rest, ",")))
	}
	ctx := context.Background()
	st, root, err := openStore(ctx, pos[0], so)
	if err == nil {
		err = checkVolume(ctx, st, root, pos[0], so)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs gc: %v\n", err)
		return 1
	}
	p := newProgress(stderr, "gc: objects examined")
	o.Progress = p.Add
	rep, err := cleaner.CleanVolume(ctx, st, root, o)
	p.Done()
	verb := "deleted"
	if o.DryRun {
		verb = "would delete"
	}
	if rep != nil {
		for _, d := range rep.Deleted {
			fmt.Fprintf(stdout, "%s %s (%d bytes): %s\n", verb, d.Key, d.Size, d.Reason)
		}
		for _, u := range rep.Aborted {
			a := "aborted"
			if o.DryRun {
				a = "would abort"
			}
			fmt.Fprintf(stdout, "%s upload %s of %s (initiated %s)\n", a, u.UploadID, u.Key, u.Initiated.UTC().Format(time.RFC3339))
		}
		for _, id := range rep.Orphans {
			fmt.Fprintf(stdout, "%s orphaned file %s\n", verb, id)
		}
		for _, s := range rep.Skipped {
			fmt.Fprintf(stdout, "left alone %s (%d bytes): %s\n", s.Key, s.Size, s.Reason)
		}
		fmt.Fprintf(stdout, "%d files, %d checkpoints (%d retained): %s %d objects (%d bytes), kept %d objects (%d bytes), %d uploads aborted, %d objects left alone, %d live writers\n",
			rep.Files, rep.Checkpoints, rep.Retained, verb, len(rep.Deleted), rep.DeletedBytes(), rep.Kept, rep.KeptBytes, len(rep.Aborted), len(rep.Skipped), rep.Writers)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs gc: %v\n", err)
		return 1
	}
	return 0
}
