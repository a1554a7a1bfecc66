package volume

import "testing"

func TestCleanRoot(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""}, {"/", ""}, {"//", ""}, {"a", "a/"}, {"a/", "a/"}, {"/a/b/", "a/b/"}, {"a/b", "a/b/"},
	} {
		if got := CleanRoot(c.in); got != c.want {
			t.Errorf("CleanRoot(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestFileKeys: the keys of a file, made and taken apart again, at the top
// of a bucket and under a root.
func TestFileKeys(t *testing.T) {
	for _, root := range []string{"", "vol/", "a/b/"} {
		files := FilesPrefix(root)
		if got, ok := RootOfFiles(files); !ok || got != root {
			t.Errorf("RootOfFiles(%q) = %q, %v; want %q", files, got, ok, root)
		}
		prefix := FilePrefix(root, "abc")
		if prefix != root+"f/abc/" {
			t.Errorf("FilePrefix(%q, abc) = %q", root, prefix)
		}
		for _, c := range []struct {
			key, id, rel string
			ok           bool
		}{
			{HeadKey(prefix), "abc", HeadName, true},
			{WriterKey(prefix, "w1"), "abc", WritersDir + "w1", true},
			{RefKey(prefix, "cp1"), "abc", RefsDir + "cp1", true},
			{LineageKey(prefix, 7), "abc", "lineage/0000000007", true},
			{WALPrefix(prefix) + "owner", "abc", "wal/owner", true},
			{files + "stray", "stray", "", false},
			{files + "/x", "", "x", false},
			{root + "ns/log/1", "", "", false},
		} {
			id, rel, ok := SplitFileKey(files, c.key)
			if ok != c.ok || ok && (id != c.id || rel != c.rel) {
				t.Errorf("SplitFileKey(%q, %q) = %q, %q, %v; want %q, %q, %v", files, c.key, id, rel, ok, c.id, c.rel, c.ok)
			}
		}
	}
	if _, ok := RootOfFiles("vol/"); ok {
		t.Error("RootOfFiles took a root for a files prefix")
	}
}

// TestKeyKinds: each recogniser takes its own names and no other.
func TestKeyKinds(t *testing.T) {
	cases := []struct {
		rel     string
		writer  bool
		ref     string // copy id, "" for none
		lineage uint64 // 0 for none
	}{
		{rel: "inode"},
		{rel: "0000000003.0"},
		{rel: "writers/0123456789abcdef0123456789abcdef", writer: true},
		{rel: "writers/"},
		{rel: "writers/a/b"},
		{rel: "refs/0123456789abcdef0123456789abcdef", ref: "0123456789abcdef0123456789abcdef"},
		{rel: "refs/"},
		{rel: "refs/not an id"},
		{rel: "lineage/0000000042", lineage: 42},
		{rel: "lineage/0000000000"},
		{rel: "lineage/42"},
		{rel: "lineage/00000000x2"},
		{rel: "wal/00000000000000000001"},
	}
	for _, c := range cases {
		if got := IsWriterKey(c.rel); got != c.writer {
			t.Errorf("IsWriterKey(%q) = %v", c.rel, got)
		}
		if id, ok := IsRefKey(c.rel); ok != (c.ref != "") || id != c.ref && ok {
			t.Errorf("IsRefKey(%q) = %q, %v", c.rel, id, ok)
		}
		if cno, ok := IsLineageKey(c.rel); ok != (c.lineage != 0) || cno != c.lineage && ok {
			t.Errorf("IsLineageKey(%q) = %d, %v", c.rel, cno, ok)
		}
	}
}

func TestVolumeKeys(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{PendingFilesPrefix("vol/"), "vol/gc/files/"},
		{PendingOrphansKey("vol/"), "vol/gc/orphans"},
		{GCPrefix(""), "gc/"},
		{ProbePrefix("vol/"), "vol/probe/"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
