package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/ckptfs/ckptfs/fs/cleaner"
	"github.com/ckptfs/ckptfs/fs/nsv2"
	"github.com/ckptfs/ckptfs/fs/volume"
)

const gcLong = `ckptfs gc: deletes the objects no retained checkpoint references, failed
flushes' and abandoned writers' leftovers, files left without a name, and
multipart uploads abandoned for longer than the grace period. Never deletes
anything a live writer may still publish: a writer keeps a renewed marker
(f/<id>/writers/) naming what it may publish, whatever its age.

A run records in the bucket (gc/files/<id>, gc/orphans) what it found
unreferenced and when; a later run deletes it once it is still unreferenced
and its time has passed since it was first found so, not since it was
written. A zero time deletes in the run that finds it.

--min-age is how long a finished object (one of a checkpoint --keep dropped,
a failed flush's) must have been unreferenced before it is deleted; it covers
readers of other mounts that opened an old checkpoint or hold a stale head.
--grace is the age before work above a file's head that no live writer marker
covers (a dead writer's objects sent ahead or unfinished flush, multipart
uploads) counts as abandoned, and how long a dead marker is kept; it must
exceed the time of one request. A file without a name is deleted once both
--grace and --ns-lag have passed since a run first found it so: --ns-lag
covers mounts whose view of the namespace lags (ns_refresh_max, up to 10m,
and the kernel's caches). --dry-run prints the plan and records nothing.

On a namespace v2 volume the files without a name are those of its orphan
records (ns2/orphan/) whose unlink's tombstone landed; a record whose name
still binds its file after --grace is of an unlink that never landed, and
goes. The run also deletes the names' history older than --trim-grace
(tombstones, decisions of renames and rmdirs once no name is locked by
them, their op lists, leases left by dead mounts): ns2/ then holds the live
names and at most --trim-grace of history.

Without --keep and --keep-for a run keeps the volume's retention policy
(ckptfs tune; the newest 3 checkpoints and those younger than 1h when it
stores none), the policy the background cleaner of every mount follows;
given either, the flags are the policy (the other one 0).`

// defaultMinAge covers another mount's writer whose view of the head is a
// little old; see package cleaner.
const defaultMinAge = 10 * time.Minute

// newGcCmd is "ckptfs gc".
func newGcCmd() *cobra.Command {
	o := cleaner.Options{Grace: cleaner.DefaultGrace, MinAge: defaultMinAge, NSLag: cleaner.DefaultNSLag, TrimGrace: nsv2.TrimGrace}
	var opts []string
	c := &cobra.Command{
		Use:               "gc [flags] STORE",
		Short:             "delete what no retained checkpoint needs",
		Long:              gcLong,
		Args:              argsBetween(1, 1, "STORE"),
		ValidArgsFunction: storeCompletion,
		RunE: func(c *cobra.Command, args []string) error {
			for _, d := range []struct {
				name string
				v    time.Duration
			}{{"keep-for", o.KeepFor}, {"grace", o.Grace}, {"min-age", o.MinAge}, {"ns-lag", o.NSLag}, {"trim-grace", o.TrimGrace}} {
				if d.v < 0 {
					return usagef("--%s %v: want a duration >= 0 such as 30m or 24h", d.name, d.v)
				}
			}
			if o.Keep < 0 {
				return usagef("--keep %d: want a number >= 0", o.Keep)
			}
			so, _, err := parseToolOpts(opts)
			if err != nil {
				return err
			}
			return gcRun(args[0], so, o, c.Flags().Changed("keep"), c.Flags().Changed("keep-for"), c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	addOptsFlag(c, &opts, "store options, as for mount: endpoint=URL, region=NAME, path_style, profile=NAME, s3_request_timeout=D, ... (repeatable)")
	f := c.Flags()
	f.IntVar(&o.Keep, "keep", 0, "retain the newest `N` checkpoints of each file (0: all; without --keep and --keep-for: the volume's policy)")
	durationFlag(f, &o.KeepFor, "keep-for", 0, "also retain checkpoints younger than this (e.g. 24h, 7d)")
	durationFlag(f, &o.Grace, "grace", o.Grace, "age before unfinished work no live writer covers counts as abandoned")
	durationFlag(f, &o.MinAge, "min-age", o.MinAge, "how long a finished object must have been unreferenced before it is deleted")
	durationFlag(f, &o.NSLag, "ns-lag", o.NSLag, "how long a file must have had no name before it is deleted, for mounts whose namespace view lags")
	durationFlag(f, &o.TrimGrace, "trim-grace", o.TrimGrace, "namespace v2: how old tombstones, decisions of changes and idle leases must be before they are deleted (mounts drop their cache after a pause this long; do not set it below the default on a volume with mounts that pause)")
	f.BoolVarP(&o.DryRun, "dry-run", "n", false, "delete and record nothing; print the plan")
	return c
}

// gcRun cleans the volume of spec and prints what it deleted.
// Without --keep and --keep-for (keepSet, forSet) the retention is the
// volume's policy; given either, the flags are the whole policy, as before
// there was one.
func gcRun(spec string, so storeOpts, o cleaner.Options, keepSet, forSet bool, stdout, stderr io.Writer) error {
	ctx := context.Background()
	st, root, err := openStore(ctx, spec, so)
	if err == nil {
		_, err = checkVolume(ctx, st, root, spec, so)
	}
	if err != nil {
		return err
	}
	if !keepSet && !forSet {
		p, _, _, err := volume.ReadPolicy(ctx, st, root)
		if err != nil {
			return fmt.Errorf("%w (give --keep and --keep-for, or store a policy with ckptfs tune)", err)
		}
		o.Keep, o.KeepFor = p.Keep, p.KeepFor
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
		for _, d := range rep.Names {
			fmt.Fprintf(stdout, "%s %s (%d bytes): %s\n", verb, d.Key, d.Size, d.Reason)
		}
		for _, d := range rep.NamesRewritten {
			w := "rewrote"
			if o.DryRun {
				w = "would rewrite"
			}
			fmt.Fprintf(stdout, "%s %s: %s\n", w, d.Key, d.Reason)
		}
		for _, s := range rep.Skipped {
			fmt.Fprintf(stdout, "left alone %s (%d bytes): %s\n", s.Key, s.Size, s.Reason)
		}
		for _, id := range rep.Referenced {
			fmt.Fprintf(stdout, "kept orphaned file %s: a copy by reference points into it\n", id)
		}
		if o.DryRun {
			for _, d := range rep.Pending {
				fmt.Fprintf(stdout, "pending %s (%d bytes): %s\n", d.Key, d.Size, d.Reason)
			}
			for _, id := range rep.PendingOrphans {
				fmt.Fprintf(stdout, "pending orphaned file %s\n", id)
			}
		}
		fmt.Fprintf(stdout, "%d files, %d checkpoints (%d retained): %s %d objects (%d bytes), kept %d objects (%d bytes; %d for copies by reference, %d unreferenced for less than the minimum age), %d orphaned files pending, %d uploads aborted, %d objects left alone, %d live writers\n",
			rep.Files, rep.Checkpoints, rep.Retained, verb, len(rep.Deleted), rep.DeletedBytes(), rep.Kept, rep.KeptBytes, len(rep.ForCopies), len(rep.Pending), len(rep.PendingOrphans), len(rep.Aborted), len(rep.Skipped), rep.Writers)
		if len(rep.Names) > 0 || len(rep.NamesRewritten) > 0 {
			fmt.Fprintf(stdout, "names: %s %d objects, %d op lists\n", verb, len(rep.Names), len(rep.NamesRewritten))
		}
	}
	return err
}
