package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCmd is "ckptfs man DIR", hidden: it writes a man page per command
// into DIR (ckptfs.1, ckptfs-mount.1, ...) with cobra/doc. A command of the
// binary rather than a go:generate program, because the command tree is
// package main's and cannot be imported: a package build runs the binary it
// packages, so its pages describe that binary. docs/man holds the pages of
// the tree, which TestManPages keeps current.
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "write the man pages of every command into DIR",
		Hidden: true,
		Args:   argsBetween(1, 1, "DIR"),
		RunE: func(c *cobra.Command, args []string) error {
			return writeManPages(args[0])
		},
	}
}

// writeManPages writes the man pages of a fresh command tree into dir.
func writeManPages(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	root := newRootCmd(mountMain, os.Stdout, os.Stderr)
	root.DisableAutoGenTag = true // no "generated on DATE" section: pages of one tree are equal
	prepareMan(root)
	header := &doc.GenManHeader{Title: "CKPTFS", Section: "1", Source: "ckptfs", Manual: "ckptfs manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("man pages in %s: %w", dir, err)
	}
	return writeHelperPage(root, dir)
}

// helperManText opens mount.ckptfs(8): how mount(8) comes to run it.
const helperManText = `mount(8) runs mount.ckptfs for /etc/fstab lines of type ckptfs and for
"mount -t ckptfs": "mount -t ckptfs -o OPTIONS STORE MOUNTPOINT" runs
"mount.ckptfs STORE MOUNTPOINT -o OPTIONS". It is a link to ckptfs (the
package installs /sbin/mount.ckptfs) and is "ckptfs mount" under another
name: the same options, the same detaching, the same exit statuses. -s, -n
and -v, which mount(8) passes on, change nothing. See ckptfs-mount(1) for
the command, fstab(5) and mount(8).

An /etc/fstab line (the keys in a file of mode 600, as an fstab line sets no
environment):
  s3://bucket/vol1  /mnt/vol1  ckptfs  _netdev,nofail,region=eu-west-1,credentials_file=/etc/ckptfs/keys  0  0`

// writeHelperPage writes mount.ckptfs.8 into dir: the page "man
// mount.ckptfs" finds, in section 8 as mount(8)'s helpers' are (mount.nfs,
// mount.cifs), made from the mount command's help under the helper's name
// and synopsis.
func writeHelperPage(root *cobra.Command, dir string) error {
	mount, _, err := root.Find([]string{"mount"})
	if err != nil || mount == root {
		return fmt.Errorf("man page of mount.ckptfs: no mount command")
	}
	helper := &cobra.Command{
		Use:   "mount.ckptfs STORE MOUNTPOINT [-sfnv] [-o name=value,...]",
		Short: "mount a ckptfs volume: the helper mount(8) runs for type ckptfs",
		Long:  manMarkdown(helperManText) + "\n" + mount.Long,
		Run:   func(*cobra.Command, []string) {},
	}
	helper.Flags().AddFlagSet(mount.LocalNonPersistentFlags())
	var b bytes.Buffer
	header := &doc.GenManHeader{Title: "MOUNT.CKPTFS", Section: "8", Source: "ckptfs", Manual: "ckptfs manual"}
	if err := doc.GenMan(helper, header, &b); err != nil {
		return fmt.Errorf("man page of mount.ckptfs: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mount.ckptfs.8"), b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("man page of mount.ckptfs: %w", err)
	}
	return nil
}

// prepareMan turns the help of c and its subcommands into the Markdown
// cobra/doc reads: the help is laid out for a terminal, so its lists and
// the tunables stay as written (code blocks) and its prose is escaped. The
// root's version line is left out: the pages describe the tree, not a build.
func prepareMan(c *cobra.Command) {
	long := strings.TrimPrefix(c.Long, version()+"\n\n")
	if more := c.Annotations[helpMore]; more != "" {
		long += "\n\n" + more
	}
	if long != "" {
		c.Long = manMarkdown(long)
	}
	for _, sub := range c.Commands() {
		prepareMan(sub)
	}
}

// manMarkdown is help text as Markdown: a paragraph (lines between blank
// lines) any of whose lines after the first is indented, and every line of
// the tunables, becomes a code block, as laid out; other paragraphs are
// prose, with Markdown's special characters escaped.
func manMarkdown(text string) string {
	var out []string
	for para := range strings.SplitSeq(text, "\n\n") {
		lines := strings.Split(strings.Trim(para, "\n"), "\n")
		laidOut := false
		for i, l := range lines {
			if strings.HasPrefix(l, " ") || (i == 0 && strings.HasSuffix(l, ":") && len(lines) > 1) {
				laidOut = true
			}
		}
		if laidOut {
			for i, l := range lines {
				lines[i] = "    " + l
			}
			out = append(out, strings.Join(lines, "\n"))
			continue
		}
		out = append(out, markdownEscaper.Replace(strings.Join(lines, "\n")))
	}
	return strings.Join(out, "\n\n") + "\n"
}

// markdownEscaper escapes what Markdown would read as markup in prose.
var markdownEscaper = strings.NewReplacer(
	`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`, "<", `\<`, ">", `\>`, "#", `\#`, "|", `\|`,
)
