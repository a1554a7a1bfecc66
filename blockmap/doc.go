// Package blockmap owns the block map of a file: the copy-on-write B+tree
// from file block number (fbn) to the Value of that block (its segment.Ptr
// and CRC-32C), the codec of its nodes, and loading nodes lazily from
// objects (ObjectLoader).
//
// # Nodes
//
// Every node is one meta block of an object, exactly MetaBlockSize bytes (a
// power of two from 256 B to 64 KiB; 4 KiB in production). The byte layout
// is documented next to EncodeNode in node.go. Leaves live in the object
// that holds the data under them; the index nodes above the leaves go to
// part 0 of the checkpoint. Where a node goes is the caller's choice: Commit
// asks a PlaceFunc.
//
// # Shape
//
// Holes have no entry. A node that overflows splits: in the middle, except
// for an insert at the right end of the rightmost path (a sequential append),
// where the left node keeps every old entry so that appends leave full nodes.
// A node that loses its last entry is removed from its parent, and a root with
// one child collapses into it. Nodes are never merged otherwise: deletes and
// truncates are rare next to overwrites, and a sparse node is rewritten whole
// the next time anything under it changes anyway.
//
// # Copy-on-write and snapshots
//
// A node is clean (stored: it has a Ptr) or dirty (changed since the last
// Commit). Clean nodes never change. A dirty node may be changed in place
// only by the tree that made it, and only until a Snapshot shares it; any
// other change copies the node, and so the path from the root to it. Commit
// places exactly the dirty nodes and returns a new clean tree that shares
// every other node with the old one. Snapshot is O(1).
//
// # Lazy loading
//
// A tree opened from a root Ptr holds stubs: a child is fetched through the
// Loader the first time a walk needs it, decoded, verified (its level is the
// one its parent expects and its keys lie in the range the parent gives it)
// and kept. A corrupt node is refused with an error matching ErrCorruptNode
// that names the node's Ptr; it is never read as data.
//
// # Concurrency
//
// Get, Scan, LeavesFor, Walk, Dirty, DirtyNodes, Height and Root may run
// concurrently with one another on one tree. Their lazy loads are serialised
// per stub (a mutex in each stub, held during that stub's one fetch), never
// by a tree-wide lock. Set, Delete, Truncate, Commit and Snapshot need
// exclusive access: the caller holds a write lock. Trees returned by Snapshot
// and Commit are independent of the tree they came from and may be used
// concurrently with it (they share only immutable nodes and stubs).
package blockmap
