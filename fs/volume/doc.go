// Package volume owns the layout of a ckptfs volume in its bucket: where
// each kind of object lives under the volume root, the helpers that make and
// recognise those keys, the volume descriptor, and the resolution of a path
// through the namespace. The mount (fs/fusefs), the offline tools
// (fs/inspect, ckptfs cp) and the cleaner (fs/cleaner) take every key from
// here; the byte layout of each object stays next to the code that writes
// it, named below.
//
// # Objects in the bucket
//
// A volume is a root prefix in a store: "" or a path ending in "/"
// (CleanRoot). Under it:
//
//	<root>ckptfs.json                the volume descriptor (DescriptorKey; this
//	                                 package): created once with If-None-Match: *
//	<root>policy.json                the retention policy (PolicyKey; policy.go):
//	                                 created with If-None-Match, changed with
//	                                 If-Match; absent: DefaultPolicy
//	<root>ns/                        the namespace of a v1 volume (NamespaceDir;
//	                                 fs/namespace)
//	    log/<seq, 20 digits>         one change, created with If-None-Match: *
//	    snap/<seq, 20 digits>        the whole namespace as of log entry <seq>
//	<root>ns2/                       the names of a v2 volume (fs/nsv2, whose
//	                                 package doc lists its keys)
//	<root>f/                         the files (FilesDir), by id, never by path
//	    <file-id>/                   one file's prefix (FilePrefix)
//	        inode                    its head: the latest checkpoint's inode
//	                                 (HeadName; segment, "Head object"), created
//	                                 with If-None-Match, replaced only with
//	                                 If-Match on the ETag last seen
//	        <cno, 10 digits>.<part>  checkpoint objects; part 0 carries the
//	                                 checkpoint's inode (segment.ObjectName)
//	        lineage/<cno, 10 digits> a copy by reference: whose objects its map's
//	                                 names are (LineageDir; segment.Lineage)
//	        refs/<copy-id>           the file copy-id points into this file's
//	                                 objects (RefsDir; objspace.go)
//	        writers/<writer-id>      a live writer's marker (WritersDir;
//	                                 fs/writermark)
//	        wal/<seq, 20 digits>     a write-ahead log record (WALDir; package wal)
//	        wal/owner                the lease of the log's one writer (wal.OwnerName)
//	<root>gc/                        the cleaner's pending records (GCDir;
//	                                 fs/cleaner/pending.go)
//	    files/<file-id>              what a run found unreferenced in one file
//	    orphans                      orphaned files a run found
//	    lease                        the background cleaner's lease (GCLeaseKey;
//	                                 fs/cleaner/lease.go): JSON, created with
//	                                 If-None-Match, replaced with If-Match
//	<root>probe/<32 hex digits>      the conditional-write check of ckptfs mount
//	                                 (ProbeDir; cmd/ckptfs/probe.go): written and
//	                                 deleted at start, listed by nothing
//
// These names are part of the format. A key under a file's prefix that is
// none of the names above is no object of ckptfs: the cleaner leaves it and
// reports it, fsck reports it.
//
// Two packages below this one spell their own names under the prefix this
// package gives it, as their formats are their own: fs/namespace (log/,
// snap/ under NamespaceDir) and fs/nsv2 (everything under ns2/). The engine (fs/engine) and the writer markers
// (fs/writermark) take a file's head, marker and reference keys from here
// (HeadKey, WriterKey, RefKey) under the prefix a file is opened at.
//
// # Objects of other files
//
// The names in a file's block map are of its own objects, or, in a copy by
// reference, of the files its lineage names: ObjectSpace (objspace.go)
// resolves each to its key, for the engine and the cleaner alike.
//
// # The volume descriptor
//
// The descriptor is JSON. These fields are part of the format:
//
//	{
//	  "layout_version": 1,          // a build refuses a larger number (LayoutVersion)
//	  "format": "stream",           // block-pointer format of new files
//	  "data_block_size": 65536,     // of new files, when created
//	  "meta_block_size": 4096,
//	  "namespace": "v2"             // only with layout_version 2; absent: v1
//	}
//
// The namespace format is chosen when the volume is made (ckptfs format -o
// namespace=v2) and changes only from v1 to v2, by ckptfs upgrade
// (fs/upgrade), which replaces the descriptor last (UpgradeDescriptor,
// If-Match). A v1 volume is layout_version 1 with no
// "namespace" (as every build before v2 wrote it): its names are the log
// under ns/ (fs/namespace). A v2 volume is layout_version 2 with
// "namespace": "v2": its names are objects under ns2/ (fs/nsv2,
// docs/namespace-v2.md). The version is raised for v2, not only the field
// added, so that a build that knows only v1 (LayoutVersion 1) refuses a v2
// volume with ErrNewerLayout instead of mounting its ns/, empty, as an empty
// filesystem; any other pairing of the two fields is ErrBadDescriptor.
// OpenNames opens the namespace the descriptor names.
//
// A mount creates it when absent (OpenDescriptor); the offline tools and a
// mount asked to require it refuse a root without one (ErrNoVolume), so a
// mistyped bucket or prefix is not taken for an empty filesystem.
package volume
