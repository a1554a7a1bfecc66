package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/ckptfs/ckptfs/fs/inspect"
	"github.com/ckptfs/ckptfs/staging"
)

// toolFlags are the flags every offline command shares: -o store options.
type toolFlags struct {
	opts []string
}

func (t *toolFlags) register(fs *flag.FlagSet) {
	fs.Func("o", "store options: endpoint=URL,region=NAME,path_style,profile=NAME (format: also the tunables)", func(s string) error {
		t.opts = splitOpts(t.opts, s)
		return nil
	})
}

// openVolume opens STORE read-only for an offline command.
func (t *toolFlags) openVolume(ctx context.Context, spec string) (*inspect.Volume, error) {
	so, rest, err := takeStoreOpts(t.opts)
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("unknown option %q", rest[0])
	}
	st, root, err := openStore(ctx, spec, so)
	if err != nil {
		return nil, err
	}
	if err := checkVolume(ctx, st, root, spec, so); err != nil {
		return nil, err
	}
	v, err := inspect.Open(ctx, st, root)
	if s3, ok := st.(*staging.S3); ok {
		err = s3.Explain(err)
	}
	return v, err
}

// toolContext is canceled by SIGINT or SIGTERM.
func toolContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// lsMain is "ckptfs ls [-o ...] STORE [PATH]".
func lsMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ckptfs ls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tf toolFlags
	tf.register(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() < 1 || fs.NArg() > 2 {
		fmt.Fprintln(stderr, "usage: ckptfs ls [-o name=value,...] STORE [PATH]")
		return 2
	}
	ctx, cancel := toolContext()
	defer cancel()
	v, err := tf.openVolume(ctx, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs ls: %v\n", err)
		return 1
	}
	entries, err := v.List(ctx, fs.Arg(1))
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs ls: %v\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	for _, e := range entries {
		name := e.Name
		if e.Target != "" {
			name += " -> " + e.Target
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", e.Kind, e.Size, e.Cno, name)
	}
	tw.Flush()
	return 0
}
