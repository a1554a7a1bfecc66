package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

const tuneLong = `ckptfs tune: shows or changes the retention policy of the volume of STORE:
the cleaner keeps the newest --keep checkpoints of each file (0: all of them)
and every checkpoint younger than --keep-for. The policy is the volume's
(<root>policy.json): every mount's background cleaner and ckptfs gc without
--keep or --keep-for follow it. A volume without one keeps the newest 3 and
those younger than 1h. Without flags it prints the policy.`

// newTuneCmd is "ckptfs tune".
func newTuneCmd() *cobra.Command {
	var (
		opts    []string
		keep    int
		keepFor time.Duration
	)
	c := &cobra.Command{
		Use:               "tune [flags] STORE",
		Short:             "show or change the volume's retention policy",
		Long:              tuneLong,
		Args:              argsBetween(1, 1, "STORE"),
		ValidArgsFunction: storeCompletion,
		RunE: func(c *cobra.Command, args []string) error {
			so, _, err := parseToolOpts(opts)
			if err != nil {
				return err
			}
			f := c.Flags()
			var change *volume.Policy
			if f.Changed("keep") || f.Changed("keep-for") {
				change = &volume.Policy{Keep: keep, KeepFor: keepFor}
			}
			return tuneRun(args[0], so, change, f.Changed("keep"), f.Changed("keep-for"), c.OutOrStdout())
		},
	}
	addOptsFlag(c, &opts, "store options, as for mount: endpoint=URL, region=NAME, path_style, profile=NAME, ... (repeatable)")
	f := c.Flags()
	f.IntVar(&keep, "keep", volume.DefaultPolicy.Keep, "keep the newest `N` checkpoints of each file (0: all)")
	durationFlag(f, &keepFor, "keep-for", volume.DefaultPolicy.KeepFor, "also keep checkpoints younger than this (e.g. 24h, 7d)")
	return c
}

// policyFlags checks --keep and --keep-for as a policy.
func policyFlags(p volume.Policy) error {
	if err := p.Check(); err != nil {
		if p.Keep < 0 || p.Keep > volume.MaxPolicyKeep {
			return usagef("--keep %d: want a number from 0 (all) to %d", p.Keep, volume.MaxPolicyKeep)
		}
		return usagef("--keep-for %v: want a duration from 0 to 100 years, such as 1h or 7d", p.KeepFor)
	}
	return nil
}

// tuneRun prints the policy of the volume of spec, after changing it when
// change is set (only the fields whose flags were given).
func tuneRun(spec string, so storeOpts, change *volume.Policy, keepSet, forSet bool, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), so.startBound())
	defer cancel()
	st, root, err := openStore(ctx, spec, so)
	if err == nil {
		_, err = checkVolume(ctx, st, root, spec, so)
	}
	if err != nil {
		return err
	}
	p, etag, stored, err := volume.ReadPolicy(ctx, st, root)
	if err != nil && !errors.Is(err, volume.ErrBadPolicy) {
		return err
	}
	if err != nil && change == nil {
		return err
	}
	if change != nil {
		if keepSet {
			p.Keep = change.Keep
		}
		if forSet {
			p.KeepFor = change.KeepFor
		}
		if err := policyFlags(p); err != nil {
			return err
		}
		if err := volume.WritePolicy(ctx, st, root, p, etag); err != nil {
			if errors.Is(err, staging.ErrPrecondition) {
				return &userError{fmt.Sprintf("the retention policy of %s changed while this change was made; nothing written: run it again", redactStore(spec)), err}
			}
			return err
		}
		stored = true
	}
	src := "the volume's"
	if !stored {
		src = "the default (the volume stores none)"
	}
	fmt.Fprintf(stdout, "retention policy of %s: keep=%d keep_for=%v (%s)\n", redactStore(spec), p.Keep, p.KeepFor, src)
	return nil
}
