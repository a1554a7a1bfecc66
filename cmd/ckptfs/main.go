// Command ckptfs mounts a bucket (or a local directory) as a filesystem whose
// every file is checkpointed into object storage.
//
//	ckptfs mount [-o name=value,...] [-f|--foreground] STORE MOUNTPOINT
//	mount.ckptfs STORE MOUNTPOINT [-o name=value,...]     (for mount(8) and /etc/fstab)
//
// See usage for the stores and the options.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ckptfs/ckptfs/config"
)

const usage = `ckptfs: a filesystem that checkpoints every file into object storage.

Usage:
  ckptfs format [-o opts] STORE        (creates the volume; once per volume)
  ckptfs mount [-o name=value,...] [-f|--foreground] STORE MOUNTPOINT
  mount.ckptfs STORE MOUNTPOINT [-o name=value,...]
  ckptfs ls [-o opts] STORE [PATH]
  ckptfs info [-o opts] [--json] STORE [PATH]
  ckptfs cat [-o opts] [--cno N] [--offset N] [--length N] STORE PATH
  ckptfs fsck [-o opts] STORE [PATH]      (exit 0: all well, 1: problems found)
  ckptfs gc [-o opts] [--keep N] [--keep-for D] [--grace D] [--min-age D] [--dry-run] STORE
  ckptfs bench [-table ...]      (reproduces the seed's tables; ckptfs bench -h)
  ckptfs --help | ckptfs mount --help | ckptfs --version (-V)

STORE is one of
  s3://bucket[/prefix]   an S3 bucket (or an S3-compatible server, see endpoint=)
  file:///abs/dir        a local directory holding the objects (no S3 needed)
  mem://                 memory; everything is lost at unmount (demos)

A volume is created once, by "ckptfs format STORE" (with the format and
block sizes of its -o options) or by the first mount with -o create; a mount
of a store without one fails, so a mistyped bucket or prefix is not taken for
a new, empty volume. mem:// is always new and needs neither.

ckptfs mount detaches once the volume is mounted, unless -f is given; a mount
that fails (bad option, unreachable store, a volume written by a newer version,
a missing or non-empty mount point) is reported before that and exits 1.
SIGINT and SIGTERM unmount after flushing every file, as does
"fusermount3 -u MOUNTPOINT" (or umount).

/etc/fstab (with mount.ckptfs installed as a link to ckptfs in /sbin):
  s3://bucket/vol1  /mnt/vol1  ckptfs  _netdev,endpoint=http://127.0.0.1:7070,path_style  0  0

Store options (-o), besides the tunables below:
  endpoint=URL     S3-compatible server ("http://127.0.0.1:7070"); default AWS
  region=NAME      region; default from the environment or profile, else
                   (AWS) the bucket's own, asked of S3 at start
  path_style       address the bucket in the path (most S3-compatible servers)
  profile=NAME     profile of the shared AWS config files
  sse=KIND         server-side encryption of written objects: AES256,
                   aws:kms or aws:kms:dsse; default the bucket's
  sse_kms_key_id=ID  KMS key of aws:kms and aws:kms:dsse (id, ARN or
                   alias); default the account's AWS managed key
  storage_class=NAME  storage class of written objects (STANDARD,
                   INTELLIGENT_TIERING, STANDARD_IA, ...); default STANDARD
  requester_pays   send x-amz-request-payer: requester (requester-pays
                   buckets)
  ca_bundle=PATH   PEM file of CAs to trust for the endpoint, besides the
                   system's and AWS_CA_BUNDLE
  checksum=ALG     checksum uploads carry for the server to verify: crc32c
                   (default), crc32, crc64nvme (single PUTs; multipart
                   uploads use crc32c) or off
  log_file=PATH    append the log here; SIGHUP reopens it (logrotate).
                   Without it a detached mount logs to the system log
                   (tag ckptfs), a foreground one to stderr
  create           create the volume if there is none (see format)
  mount_timeout=D  bound on reaching the store and reading the volume at
                   mount (default 2m)
  single_writer    mount even if the store ignores If-None-Match/If-Match;
                   then never mount this volume twice at once
Credentials come the AWS way: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
a profile, SSO, or an instance role. They are never logged.
`

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without the exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if filepath.Base(args[0]) == "mount.ckptfs" {
		return mountCmd(args[1:], true, stdout, stderr)
	}
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[1] {
	case "-h", "--help", "help":
		printHelp(stdout)
		return 0
	case "-V", "--version", "version":
		fmt.Fprintln(stdout, version())
		return 0
	case "format":
		return formatMain(args[2:], stdout, stderr)
	case "mount":
		return mountCmd(args[2:], false, stdout, stderr)
	case "bench":
		return benchRun(args[2:], stdout, stderr)
	case "ls":
		return lsMain(args[2:], stdout, stderr)
	case "info":
		return infoMain(args[2:], stdout, stderr)
	case "cat":
		return catMain(args[2:], stdout, stderr)
	case "fsck":
		return fsckMain(args[2:], stdout, stderr)
	case "gc":
		return gcMain(args[2:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "ckptfs: unknown command %q\n\n%s", args[1], usage)
	return 2
}

func printHelp(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n", version())
	fmt.Fprint(w, usage)
	fmt.Fprint(w, "\nTunables (-o name=value):\n\n")
	fmt.Fprint(w, config.Markdown())
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
