package wal

import (
	"fmt"
	"strconv"
)

// HeadMeta is the metadata key, on a file's head object, naming the last
// record of the file's log that its checkpoint holds ("The head's mark" in
// the package doc). Part of the format.
const HeadMeta = "ckptfs-wal"

// MarkHead sets, in the metadata of a head object about to be written,
// that its checkpoint holds the records up to applied.
func MarkHead(meta map[string]string, applied uint64) {
	meta[HeadMeta] = strconv.FormatUint(applied, 10)
}

// HeadApplied reads, from a head object's metadata, whether the file was
// written with the log (tracked) and the last record its checkpoint holds:
// records up to applied may be deleted, later ones are acknowledged changes
// not yet published.
func HeadApplied(meta map[string]string) (applied uint64, tracked bool, err error) {
	v, ok := meta[HeadMeta]
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("head metadata %s=%q: not a record number", HeadMeta, v)
	}
	return n, true, nil
}
