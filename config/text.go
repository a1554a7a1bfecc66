package config

import (
	"fmt"
	"strings"
)

// HelpWidth is the widest line of the terminal help (Text): it reads in a
// terminal of 100 columns without wrapping.
const HelpWidth = 100

// textIndent is where an option's description starts in Text.
const textIndent = "      "

// Text renders Options for a terminal, within HelpWidth columns: each option
// with its one default, the one `ckptfs mount` uses, then its description and
// allowed values wrapped below it; then the units and the dirty limit. It is
// no table: the descriptions are sentences, too long for columns.
func Text() string {
	var b strings.Builder
	b.WriteString("Tunables (-o name=value; each default is the one ckptfs mount uses):\n")
	for _, o := range Options() {
		def := o.Mount
		if def == "" {
			def = o.Default
		}
		if def == "" {
			def = "empty"
		}
		b.WriteByte('\n')
		var head, allowed string
		switch o.Type {
		case kindBool.String():
			// The header says it all: wal, wal=true, wal=off.
			head = fmt.Sprintf("%s[=<%s>]", o.Name, o.Type)
		case kindEnum.String():
			words := strings.Split(strings.Replace(o.Allowed, " or ", ", ", 1), ", ")
			head = fmt.Sprintf("%s=<%s>", o.Name, strings.Join(words, "|"))
		default:
			head = fmt.Sprintf("%s=<%s>", o.Name, o.Type)
			allowed = " Allowed: " + o.Allowed + "."
		}
		head += "  (default " + def + ")"
		if len(o.Aliases) > 0 {
			head += ", also " + strings.Join(o.Aliases, ", ")
		}
		wrap(&b, "  ", textIndent, head)
		wrap(&b, textIndent, textIndent, o.Doc+"."+allowed)
	}
	b.WriteByte('\n')
	wrap(&b, "", "", unitsText(plain))
	b.WriteByte('\n')
	wrap(&b, "", "", dirtyLimitText(plain))
	return b.String()
}

// wrap writes text as lines of at most HelpWidth columns, the first
// starting with first and the others with rest. A word longer than a line
// gets a line of its own.
func wrap(b *strings.Builder, first, rest, text string) {
	prefix, line := first, ""
	for _, w := range strings.Fields(text) {
		if line != "" && len([]rune(prefix+line+" "+w)) > HelpWidth {
			b.WriteString(prefix + line + "\n")
			prefix, line = rest, ""
		}
		if line == "" {
			line = w
		} else {
			line += " " + w
		}
	}
	if line != "" {
		b.WriteString(prefix + line + "\n")
	}
}

// plain and code render a name of the explanations below the options: as
// is for a terminal, in backquotes for Markdown.
func plain(s string) string { return s }
func code(s string) string  { return "`" + s + "`" }

// unitsText explains how sizes, durations and booleans are written.
func unitsText(c func(string) string) string {
	return "Sizes are bytes, or a number with K, M or G (also KiB, MiB, GiB; any case), powers of 1024. " +
		"Durations are Go durations (" + c("100ms") + ", " + c("1m30s") + "), whose units may also be " +
		c("d") + " (24h) and " + c("w") + " (7d): " + c("7d") + ", " + c("1w2d3h") + ". " +
		"Booleans are " + c("true") + ", " + c("false") + ", " + c("on") + ", " + c("off") + ", " +
		c("yes") + ", " + c("no") + ", " + c("1") + ", " + c("0") + ", or the bare name for true."
}

// dirtyLimitText explains the dirty limit of a file.
func dirtyLimitText(c func(string) string) string {
	return "The dirty limit of a file is " + c("min(max(data_cache_dirty_max_bytes_threshold, "+
		"data_cache_dirty_max_blocks_threshold × data_block_size), segment_buffer_size)") + ": " +
		FormatSize(Default().DirtyLimit()) + " with the engine defaults, less than one " +
		c("segment_mpu_chunk_size") + " piece, so nothing is sent ahead; " +
		c("ckptfs mount") + " raises it to half of " + c("memory_limit") + "."
}
