package volume

import (
	"strings"

	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/wal"
)

// Names under the volume root (see the package doc). Part of the format.
const (
	// DescriptorKey is the volume descriptor.
	DescriptorKey = "ckptfs.json"
	// NamespaceDir holds the namespace's log and snapshots (fs/namespace
	// spells its own names under it).
	NamespaceDir = "ns/"
	// FilesDir holds one prefix per file, by file id.
	FilesDir = "f/"
	// GCDir holds the cleaner's pending records.
	GCDir = "gc/"
	// ProbeDir is where the conditional-write check of a mount writes.
	ProbeDir = "probe/"
)

// Names under a file's prefix (see the package doc). Part of the format.
const (
	// HeadName is the file's head object.
	HeadName = "inode"
	// WritersDir holds the markers of the file's live writers.
	WritersDir = "writers/"
	// RefsDir holds the reference markers of copies that point into the
	// file's objects.
	RefsDir = "refs/"
	// LineageDir holds the lineage objects of a copy by reference.
	LineageDir = segment.LineageDir
	// WALDir holds the write-ahead log's records and its lease.
	WALDir = wal.Dir
)

// pendingFilesDir, pendingOrphans and gcLease are the cleaner's names
// under GCDir.
const (
	pendingFilesDir = "files/"
	pendingOrphans  = "orphans"
	gcLease         = "lease"
)

// CleanRoot is the volume root named by s: "" for the bucket's top, else s
// without leading or trailing slashes, followed by one "/".
func CleanRoot(s string) string {
	s = strings.Trim(s, "/")
	if s == "" {
		return ""
	}
	return s + "/"
}

// FilesPrefix is where the volume at root keeps its files; file id's prefix
// is FilesPrefix(root) + id + "/".
func FilesPrefix(root string) string { return root + FilesDir }

// FilePrefix is the prefix of the objects of file id of the volume at root.
func FilePrefix(root, id string) string { return FilePrefixIn(FilesPrefix(root), id) }

// FilePrefixIn is the prefix of file id under the files prefix files.
func FilePrefixIn(files, id string) string { return files + id + "/" }

// FilesOfPrefix is the files prefix that prefix, the prefix of file id, is
// under (the inverse of FilePrefixIn); false when prefix is not id's.
func FilesOfPrefix(prefix, id string) (string, bool) { return strings.CutSuffix(prefix, id+"/") }

// RootOfFiles is the root of the volume whose files prefix is files (the
// inverse of FilesPrefix); false when files is not one.
func RootOfFiles(files string) (string, bool) { return strings.CutSuffix(files, FilesDir) }

// SplitFileKey splits key, a key under the files prefix files, into the id
// of its file and its name under the file's prefix. ok is false when key is
// not under files or not under a file's prefix (then id is what follows
// files up to the first "/", or all of it).
func SplitFileKey(files, key string) (id, rel string, ok bool) {
	rest, under := strings.CutPrefix(key, files)
	id, rel, found := strings.Cut(rest, "/")
	return id, rel, under && found && id != ""
}

// HeadKey is the key of the head object of the file at prefix.
func HeadKey(prefix string) string { return prefix + HeadName }

// WriterKey is the key of the marker of writer writerID of the file at
// prefix.
func WriterKey(prefix, writerID string) string { return prefix + WritersDir + writerID }

// IsWriterKey says whether rel (a key under a file's prefix) is a writer
// marker's.
func IsWriterKey(rel string) bool {
	id, ok := strings.CutPrefix(rel, WritersDir)
	return ok && id != "" && !strings.Contains(id, "/")
}

// RefKey is the marker, under the prefix of a file copies point into, that
// says the file with id copyID does.
func RefKey(prefix, copyID string) string { return prefix + RefsDir + copyID }

// IsRefKey reports whether rel (a key under a file's prefix) is a reference
// marker, and whose.
func IsRefKey(rel string) (copyID string, ok bool) {
	id, ok := strings.CutPrefix(rel, RefsDir)
	return id, ok && segment.ValidFileID(id)
}

// LineageKey is the key of the lineage object that checkpoint cno of the
// file at prefix made.
func LineageKey(prefix string, cno uint64) string { return segment.LineageKey(prefix, cno) }

// IsLineageKey reports whether rel (a key under a file's prefix) is a
// lineage object, and the cno that made it.
func IsLineageKey(rel string) (uint64, bool) {
	s, ok := strings.CutPrefix(rel, LineageDir)
	if !ok || len(s) != 10 {
		return 0, false
	}
	var cno uint64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		cno = cno*10 + uint64(s[i]-'0')
	}
	return cno, cno != 0
}

// WALPrefix is where the write-ahead log of the file at prefix lives.
func WALPrefix(prefix string) string { return prefix + WALDir }

// GCPrefix is where the cleaner keeps its pending records under root.
func GCPrefix(root string) string { return root + GCDir }

// PendingFilesPrefix holds the cleaner's pending record of each file, by
// file id.
func PendingFilesPrefix(root string) string { return GCPrefix(root) + pendingFilesDir }

// PendingOrphansKey is the cleaner's pending record of orphaned files.
func PendingOrphansKey(root string) string { return GCPrefix(root) + pendingOrphans }

// GCLeaseKey is the lease of the background cleaner of the volume at root:
// the one mount that cleans it (fs/cleaner/lease.go).
func GCLeaseKey(root string) string { return GCPrefix(root) + gcLease }

// ProbePrefix is where the conditional-write check of a mount of the volume
// at root writes.
func ProbePrefix(root string) string { return root + ProbeDir }
