// Command ckptfs mounts a bucket (or a local directory) as a filesystem whose
// every file is checkpointed into object storage.
//
//	ckptfs mount [-o name=value,...] [-f|--foreground] STORE MOUNTPOINT
//	mount.ckptfs STORE MOUNTPOINT [-o name=value,...]     (for mount(8) and /etc/fstab)
//
// Every command is a cobra command made by its own file's newXCmd and
// registered in newRootCmd; "ckptfs --help" lists them, with the stores
// and the options.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ckptfs/ckptfs/config"
)

// synopsisText is every command with its arguments.
const synopsisText = `Synopsis:
  ckptfs format [-o opts] STORE        (creates the volume; once per volume)
  ckptfs mount [-o name=value,...] [-f|--foreground] STORE MOUNTPOINT
  mount.ckptfs STORE MOUNTPOINT [-o name=value,...]
  ckptfs ls [-o opts] STORE [PATH]
  ckptfs info [-o opts] [--json] STORE [PATH]
  ckptfs cat [-o opts] [--cno N] [--offset N] [--length N] STORE PATH
  ckptfs cp [-o opts] [--local | --from STORE2] [-v] STORE SRC DST
  ckptfs fsck [-o opts] STORE [PATH]      (exit 0: all well, 1: problems found)
  ckptfs gc [-o opts] [--keep N] [--keep-for D] [--grace D] [--min-age D] [--dry-run] STORE
  ckptfs upgrade [-o opts] [--parallel N] STORE   (namespace v1 to v2, in place)
  ckptfs bench [--table ...]      (measures the write paths; ckptfs bench --help)
  ckptfs completion bash|zsh|fish|powershell   (shell completion script)
  ckptfs --help | ckptfs COMMAND --help | ckptfs --version (-V)`

// storesText is what STORE may be, and how a volume comes to be.
const storesText = `STORE is one of
  s3://bucket[/prefix]   an S3 bucket (or an S3-compatible server, see endpoint=)
  file:///abs/dir        a local directory holding the objects (no S3 needed)
  mem://                 memory; everything is lost at unmount (demos)

A volume is created once, by "ckptfs format STORE" (with the format and
block sizes of its -o options) or by the first mount with -o create; a mount
of a store without one fails, so a mistyped bucket or prefix is not taken for
a new, empty volume. mem:// is always new and needs neither.`

// mountText is how a mount runs, detaches and ends.
var mountText = `ckptfs mount detaches once the volume is mounted, unless -f is given; a mount
that fails (unreachable store, a volume written by a newer version, a missing
or non-empty mount point) is reported before that and exits 1; a bad option, 2.
SIGINT and SIGTERM unmount after flushing every file, as does
"fusermount3 -u MOUNTPOINT" (or umount); a busy mount is unmounted lazily, and
files still open ` + busyGrace.String() + ` later are cut off and flushed. Run by systemd
(Type=notify, with -f), it notifies READY=1 once mounted and STOPPING=1.

mount(8) runs mount.ckptfs (a link to ckptfs) as
  mount.ckptfs STORE MOUNTPOINT [-sfnv] [-o name=value,...]

/etc/fstab (with mount.ckptfs installed as a link to ckptfs in /sbin):
  s3://bucket/vol1  /mnt/vol1  ckptfs  _netdev,endpoint=http://127.0.0.1:7070,path_style  0  0`

// exitText documents the exit statuses (the constants in cli.go).
const exitText = `Exit status (every command):
  0  success
  1  the operation failed (fsck: problems found)
  2  usage error: unknown command, unknown flag, wrong number of arguments,
     a bad flag value or -o option, a STORE of none of its forms
Errors are printed as one line on stderr: "ckptfs COMMAND: what went wrong".`

// tunablesText is the list of tunables, shown after the flags of the root's
// and mount's help.
func tunablesText() string { return config.Text() }

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without the exit, for tests: args[0] is the program's name.
func run(args []string, stdout, stderr io.Writer) int {
	return execute(newRootCmd(mountMain, stdout, stderr), helperArgs(args))
}

// helperArgs turns how mount(8) runs a helper, "mount.ckptfs STORE DIR
// [-sfnv] [-o opts]", into "ckptfs mount STORE DIR ...".
func helperArgs(args []string) []string {
	if len(args) > 0 && filepath.Base(args[0]) == "mount.ckptfs" {
		return append([]string{args[0], "mount"}, args[1:]...)
	}
	return args
}

// newRootCmd builds the command tree writing to stdout and stderr; mount is
// what a parsed mount runs (tests replace it). A new command is a file with
// its newXCmd and one line here.
func newRootCmd(mount mountFunc, stdout, stderr io.Writer) *cobra.Command {
	var showVersion bool
	root := &cobra.Command{
		Use:   "ckptfs",
		Short: "a filesystem that checkpoints every file into object storage",
		Long: version() + "\n\n" +
			"ckptfs: a filesystem that checkpoints every file into object storage.\n\n" +
			synopsisText + "\n\n" + storesText + "\n\n" + mountText + "\n\n" + storeOptsHelp() + "\n\n" + exitText,
		Annotations: map[string]string{helpMore: tunablesText()},
		// The root runs only for --version and to refuse what is not a
		// command; Args sees the words cobra found no command for.
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			if s := c.SuggestionsFor(args[0]); len(s) > 0 {
				return usagef("unknown command %q (did you mean %s?)", args[0], s[0])
			}
			return usagef("unknown command %q", args[0])
		},
		RunE: func(c *cobra.Command, _ []string) error {
			if showVersion {
				fmt.Fprintln(c.OutOrStdout(), version())
				return nil
			}
			fmt.Fprint(c.ErrOrStderr(), c.UsageString())
			return exitStatus(exitUsage)
		},
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	// Before the completion command is made: it keeps the writer it finds.
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.Flags().BoolVarP(&showVersion, "version", "V", false, "print the version and exit")
	root.SetHelpFunc(printHelp)
	wrappedUsage(root)
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(
		newFormatCmd(),
		newMountCmd(mount),
		newLsCmd(),
		newInfoCmd(),
		newCatCmd(),
		newCpCmd(),
		newFsckCmd(),
		newGcCmd(),
		newTuneCmd(),
		newUpgradeCmd(),
		newBenchCmd(),
		newVersionCmd(),
		newManCmd(),
	)
	root.SuggestionsMinimumDistance = 2
	helpCmd(root)
	completionCmd(root)
	return root
}

// helpCmd adds cobra's "help [command]" now, to make a help topic that is
// no command a usage error rather than the usage and exit 0.
func helpCmd(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() != "help" {
			continue
		}
		c.Short = "show the help of a command (as ckptfs COMMAND --help)"
		c.Long = ""
		c.Run = nil
		c.RunE = func(_ *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usagef("unknown help topic %q", strings.Join(args, " "))
			}
			cmd.InitDefaultHelpFlag() // shown in its flags, as with --help
			return cmd.Help()
		}
	}
}

// completionCmd adds cobra's "completion bash|zsh|fish|powershell" now,
// rather than when it runs, so that a missing or unknown shell is a usage
// error like any other instead of its help and exit 0.
func completionCmd(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		shells := "bash, zsh, fish or powershell"
		c.Short = "print the shell completion script of " + shells
		c.Args = func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown shell %q: want %s", args[0], shells)
			}
			return nil
		}
		c.RunE = func(*cobra.Command, []string) error {
			return usagef("want a shell: %s", shells)
		}
	}
}
