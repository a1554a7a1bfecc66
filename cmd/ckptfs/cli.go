package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ckptfs/ckptfs/config"
)

// Exit statuses of every command (documented in the root help and README).
const (
	exitOK     = 0 // success
	exitFailed = 1 // the operation failed (fsck: problems found)
	exitUsage  = 2 // unknown command or flag, wrong number of arguments, bad flag value
)

// usageError is a command line that cannot be run as given: exit 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef is a usageError from a format.
func usagef(format string, a ...any) error {
	return &usageError{fmt.Errorf(format, a...)}
}

// exitStatus ends a command with a status, having printed all it had to
// say: a mount that reported its failure itself, fsck's problems.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// execute runs the command line args (args[0] is the program's name) on root
// and returns the exit status. An error is printed as one line on root's
// stderr, "ckptfs CMD: what", never with the usage after it.
func execute(root *cobra.Command, args []string) int {
	stderr := root.ErrOrStderr()
	root.SetArgs(args[1:])
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	var st exitStatus
	if errors.As(err, &st) {
		return int(st)
	}
	if cmd == nil {
		cmd = root
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "%s: %s (see %s --help)\n", cmd.CommandPath(), msg, cmd.CommandPath())
		return exitUsage
	}
	fmt.Fprintf(stderr, "%s: %s\n", cmd.CommandPath(), msg)
	return exitFailed
}

// flagError makes every flag parse error a usage error, and points the
// users of the old single-dash long flags (-table) at the new spelling.
func flagError(c *cobra.Command, err error) error {
	var nf *pflag.NotExistError
	if errors.As(err, &nf) {
		s, _, _ := strings.Cut(nf.GetSpecifiedShortnames(), "=")
		if len(s) > 1 {
			if f := c.Flags().Lookup(s); f != nil {
				return usagef("unknown flag -%s (did you mean --%s?)", s, s)
			}
		}
	}
	return &usageError{err}
}

// argsBetween accepts min to max positional arguments, named by what for
// the message.
func argsBetween(lo, hi int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			if len(args) == 1 {
				return usagef("want %s, got 1 argument", what)
			}
			return usagef("want %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

// optsValue is the repeatable -o name=value,... flag: every item, in order.
type optsValue struct{ items *[]string }

func (o optsValue) String() string { return strings.Join(*o.items, ",") }
func (o optsValue) Type() string   { return "name=value,..." }
func (o optsValue) Set(s string) error {
	*o.items = splitOpts(*o.items, s)
	return nil
}

// addOptsFlag registers -o/--options, appending its items to dst.
func addOptsFlag(c *cobra.Command, dst *[]string, usage string) {
	c.Flags().VarP(optsValue{dst}, "options", "o", usage)
	// Registering a flag's completion twice is an error; addOptsFlag runs
	// once per command.
	_ = c.RegisterFlagCompletionFunc("options", completeOpts)
}

// completeOpts completes the last item of an -o list (what follows the
// last comma, the items before it kept as typed) to the names of options:
// "name=" for one that takes a value. No space follows, so that a value or
// another item can be typed next.
func completeOpts(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const directive = cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	before, last := "", toComplete
	if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
		before, last = toComplete[:i+1], toComplete[i+1:]
	}
	if strings.Contains(last, "=") {
		return nil, directive // a value: nothing to offer
	}
	var out []cobra.Completion
	for _, item := range config.CompletionItems() {
		if strings.HasPrefix(item, last) {
			out = append(out, before+item)
		}
	}
	return out, directive
}

// splitOpts appends the items of an -o string to opts.
func splitOpts(opts []string, s string) []string {
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			opts = append(opts, item)
		}
	}
	return opts
}

// helpMore is the annotation whose text a command's help prints after its
// flags (the tunables, which are long).
const helpMore = "ckptfs.help.more"

// printHelp is the help of every command: the long text, the usage with
// the flags, then what the command keeps for last.
func printHelp(c *cobra.Command, _ []string) {
	w := c.OutOrStdout()
	if text := strings.TrimRight(c.Long, "\n"); text != "" {
		fmt.Fprintf(w, "%s\n\n", text)
	} else if c.Short != "" {
		fmt.Fprintf(w, "%s\n\n", c.Short)
	}
	fmt.Fprint(w, c.UsageString())
	if more := c.Annotations[helpMore]; more != "" {
		fmt.Fprintf(w, "\n%s", more)
	}
}

// storeCompletion completes the first argument of a command that takes a
// STORE with the schemes; the rest as files.
func storeCompletion(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return []cobra.Completion{"s3://", "file:///", "mem://"}, cobra.ShellCompDirectiveNoSpace
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// durationValue is a duration flag read by config.ParseDuration, so that
// flags take what -o options take: 7d, 2w, 1w2d3h besides Go's units.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}
func (v durationValue) Type() string { return "duration" }
func (v durationValue) Set(s string) error {
	d, err := config.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// durationFlag registers a duration flag (see durationValue) with its
// default.
func durationFlag(f *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	f.Var(durationValue{p}, name, usage)
}

// toolTunables are the tunables the offline tools take besides the store
// options: what reaching the store needs, and the log level (the tools keep
// no log: it changes nothing), so that the -o string of a mount serves its
// tools too. The others shape a mount
// (ns_refresh, wal, ...) and are refused as for mount only.
var toolTunables = []string{"s3_connect_timeout", "s3_request_timeout", "s3_stall_timeout", "s3_retry_max_time", "log"}

// parseToolOpts reads the -o items of an offline tool: the store options,
// then toolTunables. Every problem is a usage error, and every unknown or
// mount-only option is named in it, an unknown one with the nearest known
// name.
func parseToolOpts(items []string) (storeOpts, config.Config, error) {
	so, rest, err := takeStoreOpts(items)
	if err != nil {
		return so, config.Config{}, &usageError{err}
	}
	var take, unknown, mountOnly []string
	for _, item := range rest {
		name, _, _ := strings.Cut(item, "=")
		switch {
		case slices.Contains(toolTunables, name):
			take = append(take, item)
		case config.IsKnown(name):
			mountOnly = append(mountOnly, item)
		default:
			if s := config.Suggest(name); s != "" {
				item += " (did you mean " + s + "?)"
			}
			unknown = append(unknown, item)
		}
	}
	var problems []string
	if len(unknown) > 0 {
		problems = append(problems, "unknown options: "+strings.Join(unknown, ", "))
	}
	if len(mountOnly) > 0 {
		problems = append(problems, "options for mount only: "+strings.Join(mountOnly, ", "))
	}
	if len(problems) > 0 {
		return so, config.Config{}, usagef("%s", strings.Join(problems, "; "))
	}
	cfg, err := config.Parse(config.Default(), strings.Join(take, ","))
	if err != nil {
		return so, cfg, &usageError{fmt.Errorf("options: %w", err)}
	}
	so.timeouts = cfg.S3Timeouts()
	return so, cfg, nil
}

// parseMountOpts reads the -o items of mount and format: the store options,
// then every tunable. Every problem is a usage error.
func parseMountOpts(items []string) (storeOpts, config.Config, error) {
	so, rest, err := takeStoreOpts(items)
	if err != nil {
		return so, config.Config{}, &usageError{err}
	}
	cfg, err := config.ParseMount(config.TotalRAM(), strings.Join(rest, ","))
	if err != nil {
		return so, cfg, &usageError{fmt.Errorf("options: %w", err)}
	}
	so.timeouts = cfg.S3Timeouts()
	return so, cfg, nil
}
