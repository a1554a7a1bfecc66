package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/upgrade"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

const upgradeLong = `ckptfs upgrade: converts the volume of STORE from namespace v1 (one log of
changes) to namespace v2 (one object per name; experimental, see ckptfs format)
in place. Files' data is not touched: only names move.

It first checks that v2 can hold the volume's names: a file removed while
open and not yet deleted by ckptfs gc is refused, with its id, and nothing
changes. A file of several names (hard links) is carried: its attributes
and count of names go to one object, which each of its names binds. Then it fences the
v1 log: from then on a running v1 mount's changes fail with EIO and its
log names the upgrade, and a new v1 mount is refused; files already open
keep being written and flushed. Then it writes every name as a v2 object
(--parallel at once), and last marks the volume v2 (layout version 2),
which builds before namespace v2 refuse as a newer layout.

Interrupted, it leaves the volume fenced and still v1: run it again, and it
finishes. Unmount the v1 mounts and mount the volume again once it is done.
There is no way back but copying the files to a v1 volume (ckptfs cp --from).
What v2 does not keep yet of the root directory (its mode, owner and
extended attributes, when not 0755, 0:0 and none) is reported.`

// newUpgradeCmd is "ckptfs upgrade".
func newUpgradeCmd() *cobra.Command {
	var (
		opts     []string
		parallel int
	)
	c := &cobra.Command{
		Use:               "upgrade [flags] STORE",
		Short:             "convert a volume from namespace v1 to v2, in place",
		Long:              upgradeLong,
		Args:              argsBetween(1, 1, "STORE"),
		ValidArgsFunction: storeCompletion,
		RunE: func(c *cobra.Command, args []string) error {
			if parallel < 1 || parallel > 1024 {
				return usagef("--parallel %d: want a number from 1 to 1024", parallel)
			}
			so, _, err := parseToolOpts(opts)
			if err != nil {
				return err
			}
			return upgradeRun(args[0], so, parallel, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	addOptsFlag(c, &opts, "store options, as for mount: endpoint=URL, region=NAME, path_style, profile=NAME, ... (repeatable)")
	c.Flags().IntVar(&parallel, "parallel", upgrade.Parallel, "names written at once")
	return c
}

// upgradeRun upgrades the volume of spec and prints what it did.
func upgradeRun(spec string, so storeOpts, parallel int, stdout, stderr io.Writer) error {
	// Ctrl-C or SIGTERM stops it between requests; what it wrote stays, and
	// a rerun goes on from there.
	ctx, stop := toolContext()
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, so.startBound())
	defer cancel()
	st, root, err := openStore(sctx, spec, so)
	var d volume.Descriptor
	if err == nil {
		d, err = checkVolume(sctx, st, root, spec, so)
	}
	if err != nil {
		return err
	}
	return upgradeStore(sctx, ctx, st, root, d, spec, parallel, stdout, stderr)
}

// upgradeStore is upgradeRun on the store st opened from spec, whose
// descriptor is d; sctx bounds the requests before the upgrade proper (the
// start's bound), ctx the upgrade (the signals').
func upgradeStore(sctx, ctx context.Context, st staging.Store, root string, d volume.Descriptor, spec string, parallel int, stdout, stderr io.Writer) error {
	if d.NamespaceVersion() == config.NamespaceV2 {
		return &userError{fmt.Sprintf("%s is already namespace v2; nothing changed", redactStore(spec)), upgrade.ErrAlreadyV2}
	}
	// Before the fence: a store that refuses writes (read-only
	// credentials) or ignores conditions must change nothing.
	if err := probeConditions(sctx, st, root); err != nil {
		return &userError{fmt.Sprintf("%s cannot be upgraded: the store must take conditional writes, and %v; nothing changed", redactStore(spec), err), err}
	}

	p := newProgress(stderr, "upgrade: names written")
	// One call per name written, from several goroutines (Add locks).
	rep, err := upgrade.Upgrade(ctx, st, root, upgrade.Options{Parallel: parallel, Progress: func(int) { p.Add(1) }})
	p.Done()
	var refused *upgrade.RefusedError
	switch {
	case errors.As(err, &refused):
		return &userError{fmt.Sprintf("%s: %v", redactStore(spec), refused), err}
	case errors.Is(err, upgrade.ErrAlreadyV2):
		return &userError{fmt.Sprintf("%s is already namespace v2; nothing changed", redactStore(spec)), err}
	case err != nil && ctx.Err() != nil:
		return &userError{fmt.Sprintf("upgrade of %s interrupted: run ckptfs upgrade again to finish (a v1 mount fails every change meanwhile if the fence was written)", redactStore(spec)), err}
	case err != nil:
		return fmt.Errorf("%w (the volume is fenced and still v1 if the fence was written: run ckptfs upgrade again to finish)", err)
	}
	how := "upgraded"
	if rep.Resumed {
		how = "upgraded (an interrupted upgrade finished)"
	}
	linked := ""
	switch rep.Linked {
	case 0:
	case 1:
		linked = ", 1 file of several names (hard links)"
	default:
		linked = fmt.Sprintf(", %d files of several names (hard links)", rep.Linked)
	}
	fmt.Fprintf(stdout, "%s %s to namespace v2: %d names (%d directories, %d files, %d symlinks, %d others)%s; the v1 log ends at entry %d, its fence\n",
		how, redactStore(spec), rep.Names, rep.Dirs, rep.Files, rep.Symlinks, rep.Others, linked, rep.Fence)
	fmt.Fprintln(stdout, "v1 mounts of the volume fail every change now: unmount them and mount the volume again")
	return nil
}
