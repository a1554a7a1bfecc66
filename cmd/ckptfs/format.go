package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
)

// newFormatCmd is "ckptfs format [-o opts] STORE": it writes the volume
// descriptor of a new volume, with the block-pointer format and block sizes
// of the options, and refuses a store that already holds one.
func newFormatCmd() *cobra.Command {
	var (
		opts    []string
		keep    int
		keepFor time.Duration
	)
	c := &cobra.Command{
		Use:   "format [flags] STORE",
		Short: "create the volume of STORE (once per volume)",
		Long: "ckptfs format: creates the volume of STORE, with the format and block sizes of\n" +
			"its -o options (format=, data_block_size=, meta_block_size=; see ckptfs --help),\n" +
			"and refuses a store that already holds one. Once per volume; a mount with\n" +
			"-o create does the same. --keep and --keep-for store the volume's retention\n" +
			"policy (see ckptfs tune) with it.\n\n" +
			"-o namespace=v2 (experimental) makes a volume whose names are objects\n" +
			"(docs/namespace-v2.md), so that mounts creating different names never contend;\n" +
			"every change of names works, and so do gc and fsck; ckptfs upgrade converts a\n" +
			"v1 volume. Builds before it refuse such a volume (a newer layout version).",
		Args:              argsBetween(1, 1, "STORE"),
		ValidArgsFunction: storeCompletion,
		RunE: func(c *cobra.Command, args []string) error {
			spec := args[0]
			var policy *volume.Policy
			if c.Flags().Changed("keep") || c.Flags().Changed("keep-for") {
				policy = &volume.Policy{Keep: keep, KeepFor: keepFor}
				if err := policyFlags(*policy); err != nil {
					return err
				}
			}
			v, err := formatRun(spec, opts, policy)
			if errors.Is(err, volume.ErrExists) {
				return &userError{fmt.Sprintf("%s is already a volume (its %s is there); nothing written", redactStore(spec), volume.DescriptorKey), err}
			}
			if err != nil {
				return err
			}
			// Sizes as options are written, so that the line can be given
			// back as -o.
			ns := ""
			if v.NamespaceVersion() != config.NamespaceV1 {
				ns = " namespace=" + v.NamespaceVersion().String()
			}
			fmt.Fprintf(c.OutOrStdout(), "created volume %s: format=%s data_block_size=%s meta_block_size=%s%s\n",
				redactStore(spec), v.Format, config.FormatSize(v.DataBlockSize), config.FormatSize(v.MetaBlockSize), ns)
			if policy != nil {
				fmt.Fprintf(c.OutOrStdout(), "retention policy: keep=%d keep_for=%v\n", policy.Keep, policy.KeepFor)
			}
			return nil
		},
	}
	addOptsFlag(c, &opts, "store options and the volume's tunables (format=, data_block_size=, ...; repeatable)")
	f := c.Flags()
	f.IntVar(&keep, "keep", volume.DefaultPolicy.Keep, "retention policy: keep the newest `N` checkpoints of each file (0: all)")
	durationFlag(f, &keepFor, "keep-for", volume.DefaultPolicy.KeepFor, "retention policy: also keep checkpoints younger than this")
	return c
}

func formatRun(spec string, opts []string, policy *volume.Policy) (volume.Descriptor, error) {
	so, cfg, err := parseMountOpts(opts)
	if err != nil {
		return volume.Descriptor{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), so.startBound())
	defer cancel()
	st, root, err := openStore(ctx, spec, so)
	if err != nil {
		return volume.Descriptor{}, explainStart(ctx, err, nil, spec, so)
	}
	v, err := volume.CreateDescriptor(ctx, st, root, cfg)
	if err != nil && !errors.Is(err, volume.ErrExists) {
		return v, explainStart(ctx, err, st, spec, so)
	}
	if err == nil && policy != nil {
		if err := volume.WritePolicy(ctx, st, root, *policy, ""); err != nil {
			return v, fmt.Errorf("volume created, its retention policy not stored (ckptfs tune stores it): %w", err)
		}
	}
	return v, err
}

// checkVolume fails, without writing anything, when the store holds no
// volume: the offline tools would otherwise show a mistyped prefix as an
// empty filesystem.
func checkVolume(ctx context.Context, st staging.Store, root, spec string, so storeOpts) (volume.Descriptor, error) {
	d, err := volume.ReadDescriptor(ctx, st, root)
	if err != nil {
		if errors.Is(err, volume.ErrNoVolume) {
			return d, &userError{fmt.Sprintf("no ckptfs volume at %s (no %s there)", redactStore(spec), descriptorShown(spec)), err}
		}
		return d, explainStart(ctx, err, st, spec, so)
	}
	return d, nil
}
