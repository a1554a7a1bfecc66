package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ckptfs/ckptfs/config"
)

// helpWidth is the widest line of every command's help.
const helpWidth = config.HelpWidth

// storeOptDoc documents one store option in the help: its usage (name=VALUE
// or the bare name) and what it does.
type storeOptDoc struct{ usage, doc string }

// storeOptDocs are the -o items that choose and reach the store, as the
// help lists them; TestStoreOptionNamesAgree keeps them equal to
// config.StoreOptionNames.
var storeOptDocs = []storeOptDoc{
	{"endpoint=URL", `S3-compatible server ("http://127.0.0.1:7070"; host:port is http://host:port); default AWS`},
	{"region=NAME", "region; default from the environment or profile, else (AWS) the bucket's own, asked of S3 at start"},
	{"path_style", "address the bucket in the path (most S3-compatible servers); also use_path_request_style"},
	{"profile=NAME", "profile of the shared AWS config files (of credentials_file, when it is in AWS's format)"},
	{"credentials_file=PATH", "file of keys, mode 600: AWS's credentials file ([default] with aws_access_key_id and aws_secret_access_key) or s3fs's passwd file (ACCESS_KEY:SECRET_KEY, or BUCKET:ACCESS_KEY:SECRET_KEY); its keys win over the environment's. Also passwd_file"},
	{"sse=KIND", "server-side encryption of written objects: AES256, aws:kms or aws:kms:dsse; default the bucket's. Also s3fs's use_sse: bare for AES256, use_sse=kmsid[:KEY-ID] for aws:kms"},
	{"sse_kms_key_id=ID", "KMS key of aws:kms and aws:kms:dsse (id, ARN or alias); default the account's AWS managed key"},
	{"storage_class=NAME", "storage class of written objects (STANDARD, INTELLIGENT_TIERING, STANDARD_IA, ...; any case); default STANDARD"},
	{"requester_pays", "send x-amz-request-payer: requester (requester-pays buckets)"},
	{"ca_bundle=PATH", "PEM file of CAs to trust for the endpoint, besides the system's and AWS_CA_BUNDLE"},
	{"checksum=ALG", "checksum uploads carry for the server to verify: crc32c (default), crc32, crc64nvme (single PUTs; multipart uploads use crc32c) or off"},
	{"log_file=PATH", "append the log here; SIGHUP reopens it (logrotate). Without it a detached mount logs to journald, else the system log (tag ckptfs); a foreground one to stderr. Also logfile"},
	{"create", "create the volume if there is none (see format)"},
	{"mount_timeout=D", "bound on reaching the store and reading the volume at mount (default " + formatDuration(defaultMountTimeout) + ")"},
	{"single_writer", "mount even if the store ignores If-None-Match/If-Match; then never mount this volume twice at once"},
}

// formatDuration writes d without Go's zero units ("2m", not "2m0s").
func formatDuration(d time.Duration) string {
	s := strings.TrimSuffix(d.String(), "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// storeOptsHelp is the store options' part of the help.
func storeOptsHelp() string {
	var rows [][2]string
	for _, o := range storeOptDocs {
		rows = append(rows, [2]string{o.usage, o.doc})
	}
	var b strings.Builder
	b.WriteString("Store options (-o), besides the tunables below:\n")
	b.WriteString(columns(rows))
	b.WriteString(wrapText("Every tool (ls, info, cat, cp, fsck, gc) takes these and the tunables that "+
		"reach the store ("+strings.Join(toolTunables, ", ")+"), so that a mount's -o string "+
		"serves its tools (they keep no log: log= changes nothing there); the other tunables "+
		"shape a mount and are refused there as for mount only.", ""))
	b.WriteString(wrapText("Credentials come from credentials_file=, else the AWS way: AWS_ACCESS_KEY_ID and "+
		"AWS_SECRET_ACCESS_KEY, a profile, SSO, or an instance role. They are never logged.", ""))
	return strings.TrimSuffix(b.String(), "\n")
}

// columns lays out rows of a name and its description as two columns
// (text/tabwriter), the description wrapped in its column within
// helpWidth.
func columns(rows [][2]string) string {
	const indent, gap = "  ", 2
	nameWidth := 0
	for _, r := range rows {
		nameWidth = max(nameWidth, len(r[0]))
	}
	docWidth := helpWidth - len(indent) - nameWidth - gap
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, gap, ' ', 0)
	for _, r := range rows {
		for i, line := range wrapLines(r[1], docWidth) {
			name := ""
			if i == 0 {
				name = r[0]
			}
			fmt.Fprintf(w, "%s%s\t%s\n", indent, name, line)
		}
	}
	_ = w.Flush() // into a strings.Builder, which does not fail
	return b.String()
}

// wrapText wraps text within helpWidth, each line starting with indent.
func wrapText(text, indent string) string {
	var b strings.Builder
	for _, line := range wrapLines(text, helpWidth-len(indent)) {
		b.WriteString(indent + line + "\n")
	}
	return b.String()
}

// wrapLines breaks text into lines of at most width columns, at spaces; a
// word longer than width gets a line of its own.
func wrapLines(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len([]rune(line))+1+len([]rune(w)) > width {
			lines = append(lines, line)
			line = ""
		}
		if line == "" {
			line = w
		} else {
			line += " " + w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// wrappedUsage is cobra's usage template with the flags' usages wrapped
// within helpWidth.
func wrappedUsage(root *cobra.Command) {
	cobra.AddTemplateFunc("wrappedFlagUsages", func(f *pflag.FlagSet) string {
		return f.FlagUsagesWrapped(helpWidth)
	})
	t := root.UsageTemplate()
	t = strings.ReplaceAll(t, ".LocalFlags.FlagUsages", "wrappedFlagUsages .LocalFlags")
	t = strings.ReplaceAll(t, ".InheritedFlags.FlagUsages", "wrappedFlagUsages .InheritedFlags")
	root.SetUsageTemplate(t)
}
