package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ckptfs/ckptfs/fs/inspect"
	"github.com/ckptfs/ckptfs/staging/s3"
)

// toolFlags are the flags every offline command shares: -o store options.
type toolFlags struct {
	opts []string
}

func (t *toolFlags) register(c *cobra.Command) {
	addOptsFlag(c, &t.opts, "store options, as for mount: endpoint=URL, region=NAME, path_style, profile=NAME, s3_request_timeout=D, ... (repeatable)")
}

// openVolume opens STORE read-only for an offline command.
func (t *toolFlags) openVolume(ctx context.Context, spec string) (*inspect.Volume, error) {
	so, _, err := parseToolOpts(t.opts)
	if err != nil {
		return nil, err
	}
	st, root, err := openStore(ctx, spec, so)
	if err != nil {
		return nil, err
	}
	if err := checkVolume(ctx, st, root, spec, so); err != nil {
		return nil, err
	}
	v, err := inspect.Open(ctx, st, root)
	if s3, ok := st.(*s3.Store); ok {
		err = s3.Explain(err)
	}
	return v, err
}

// toolContext is canceled by SIGINT or SIGTERM.
func toolContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// newLsCmd is "ckptfs ls [-o ...] STORE [PATH]".
func newLsCmd() *cobra.Command {
	var tf toolFlags
	c := &cobra.Command{
		Use:               "ls [flags] STORE [PATH]",
		Short:             "list a directory of the volume (kind, size, checkpoint, name)",
		Long:              "ckptfs ls: lists the directory PATH (default the root) of the volume of STORE,\nread from the bucket without mounting: kind, size, checkpoint number, name.",
		Args:              argsBetween(1, 2, "STORE [PATH]"),
		ValidArgsFunction: storeCompletion,
		RunE: func(c *cobra.Command, args []string) error {
			ctx, cancel := toolContext()
			defer cancel()
			v, err := tf.openVolume(ctx, args[0])
			if err != nil {
				return err
			}
			entries, err := v.List(ctx, argAt(args, 1))
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 8, 2, ' ', 0)
			for _, e := range entries {
				name := e.Name
				if e.Target != "" {
					name += " -> " + e.Target
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", e.Kind, e.Size, e.Cno, name)
			}
			return tw.Flush()
		},
	}
	tf.register(c)
	return c
}

// argAt is args[i], or "" when there are fewer.
func argAt(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}
