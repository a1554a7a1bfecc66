package main

import (
	"context"
	"fmt"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"unicode/utf8"

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
	if _, err := checkVolume(ctx, st, root, spec, so); err != nil {
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
		Long:              "ckptfs ls: lists the directory PATH (default the root) of the volume of STORE,\nread from the bucket without mounting: kind, size, checkpoint number, name.\nA name (or symlink target) that holds a character that is not printable (a newline,\na tab, bytes that are not UTF-8), begins with a double quote, ends with a space or\nholds \" -> \" is printed quoted, with Go's escapes (\"a\\nb\"), so that each line is one entry.",
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
				name := lsQuote(e.Name)
				if e.Target != "" {
					name += " -> " + lsQuote(e.Target)
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", e.Kind, e.Size, e.Cno, name)
			}
			return tw.Flush()
		},
	}
	tf.register(c)
	return c
}

// lsQuote is name as ls prints it: as it is, unless that would be read as
// something else — a newline or tab splits the line or the columns, other
// control characters and bytes that are not UTF-8 show as nothing or as
// garbage, a leading double quote looks quoted, a trailing space is lost,
// " -> " looks like a symlink's target — then quoted with Go's escapes
// (strconv.Quote), which read back exactly (strconv.Unquote).
func lsQuote(name string) string {
	plain := utf8.ValidString(name) && !strings.HasPrefix(name, `"`) &&
		!strings.HasSuffix(name, " ") && !strings.Contains(name, " -> ")
	for _, r := range name {
		if !plain {
			break
		}
		plain = strconv.IsPrint(r)
	}
	if plain {
		return name
	}
	return strconv.Quote(name)
}

// argAt is args[i], or "" when there are fewer.
func argAt(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}
