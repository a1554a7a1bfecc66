package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/fusefs"
	"github.com/ckptfs/ckptfs/staging"
)

// formatMain is "ckptfs format [-o opts] STORE": it writes the volume
// descriptor of a new volume, with the block-pointer format and block sizes
// of the options, and refuses a store that already holds one.
func formatMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ckptfs format", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf toolFlags
	tf.register(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: ckptfs format [-o name=value,...] STORE")
		return 2
	}
	spec := fs.Arg(0)
	v, err := formatRun(spec, tf.opts)
	if errors.Is(err, fusefs.ErrVolumeExists) {
		fmt.Fprintf(stderr, "ckptfs format: %s is already a volume (its %s is there); nothing written\n", redactStore(spec), fusefs.VolumeKey)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs format: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "created volume %s: format=%s data_block_size=%d meta_block_size=%d\n",
		redactStore(spec), v.Format, v.DataBlockSize, v.MetaBlockSize)
	return 0
}

func formatRun(spec string, opts []string) (fusefs.Volume, error) {
	so, rest, err := takeStoreOpts(opts)
	if err != nil {
		return fusefs.Volume{}, err
	}
	cfg, err := config.ParseMount(config.TotalRAM(), strings.Join(rest, ","))
	if err != nil {
		return fusefs.Volume{}, fmt.Errorf("options: %w", err)
	}
	so.timeouts = cfg.S3Timeouts()
	ctx, cancel := context.WithTimeout(context.Background(), so.startBound())
	defer cancel()
	st, root, err := openStore(ctx, spec, so)
	if err != nil {
		return fusefs.Volume{}, explainStart(ctx, err, nil, spec, so)
	}
	v, err := fusefs.CreateVolume(ctx, st, root, cfg)
	if err != nil && !errors.Is(err, fusefs.ErrVolumeExists) {
		return v, explainStart(ctx, err, st, spec, so)
	}
	return v, err
}

// checkVolume fails, without writing anything, when the store holds no
// volume: the offline tools would otherwise show a mistyped prefix as an
// empty filesystem.
func checkVolume(ctx context.Context, st staging.Store, root, spec string, so storeOpts) error {
	if _, err := fusefs.ReadVolume(ctx, st, root); err != nil {
		if errors.Is(err, fusefs.ErrNoVolume) {
			return &userError{fmt.Sprintf("no ckptfs volume at %s (no %s there)", redactStore(spec), fusefs.VolumeKey), err}
		}
		return explainStart(ctx, err, st, spec, so)
	}
	return nil
}
