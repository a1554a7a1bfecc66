package namespace

import "context"

// Names is the namespace of a volume as its users see it: the mount
// (fs/fusefs, .checkpoints included), the cleaner, and the tools (ls, cp,
// fsck, through fs/inspect and fs/volume). They hold a Names, not a
// *Namespace, so that another implementation can stand behind it.
//
// Why its reads take a context and return an error: *Namespace (v1) holds
// the whole tree in memory and answers them from it, never waiting, but v2
// (docs/namespace-v2.md, to come) keeps each name in an object of its own
// and a mount reads the names it uses: a lookup, a listing or a stat of a
// name not cached will wait for the store, within the operation's deadline
// (the ctx), and may fail as any store request does. A caller maps such an error
// as it maps the store's elsewhere (the mount: to an errno, at its one
// mapping; a tool: wrapped with what it was doing).
//
// What is here is what every implementation answers: reads, changes (each
// stored before it returns, as today), Refresh and Close. What only v1 has
// is not: a caller that can do without it asks for it with a type assertion
// on a one-method interface (Sequenced, Counted, AttrsLater) and has a way
// to go on without it, so that an implementation that lacks it needs no
// stand-in that would lie. Compact, Compactable and Wait belong to v1's log
// and its own tests, and stay on *Namespace only.
//
// Errors are the package's sentinels (ErrNotExist, ErrExist, ...), wrapped;
// errors of the store come wrapped as they are (context.Canceled too).
type Names interface {
	// Lookup returns the node named name in directory dir.
	Lookup(ctx context.Context, dir Ino, name string) (Node, error)
	// GetNode returns node ino (also an orphan's).
	GetNode(ctx context.Context, ino Ino) (Node, error)
	// ReadDir lists directory dir sorted by name.
	ReadDir(ctx context.Context, dir Ino) ([]Dirent, error)
	// ReadDirAfter lists the entries of directory dir whose cookie is above
	// cookie, in cookie order (a readdir offset; 0 lists everything).
	ReadDirAfter(ctx context.Context, dir Ino, cookie uint64) ([]Dirent, error)
	// GetXattr returns the value of extended attribute name of node ino.
	GetXattr(ctx context.Context, ino Ino, name string) ([]byte, error)
	// ListXattr returns the names of node ino's extended attributes, sorted.
	ListXattr(ctx context.Context, ino Ino) ([]string, error)
	// Named reports whether fileID is a file with a name left.
	Named(ctx context.Context, fileID string) (bool, error)
	// Orphaned reports whether fileID is an orphan: a file with no name
	// left, not yet forgotten.
	Orphaned(ctx context.Context, fileID string) (bool, error)
	// Orphans lists the files with no name left, by ino.
	Orphans(ctx context.Context) ([]Orphan, error)

	Create(ctx context.Context, parent Ino, name string, mode uint32, owner Owner) (Node, error)
	Mkdir(ctx context.Context, parent Ino, name string, mode uint32, owner Owner) (Node, error)
	Mknod(ctx context.Context, parent Ino, name string, kind Kind, mode uint32, owner Owner) (Node, error)
	MknodDevice(ctx context.Context, parent Ino, name string, kind Kind, mode, major, minor uint32, owner Owner) (Node, error)
	Symlink(ctx context.Context, parent Ino, name, target string, owner Owner) (Node, error)
	Link(ctx context.Context, ino, newParent Ino, newName string) (Node, error)
	Unlink(ctx context.Context, parent Ino, name string) (Node, error)
	Rmdir(ctx context.Context, parent Ino, name string) error
	Rename(ctx context.Context, oldParent Ino, oldName string, newParent Ino, newName string, flags RenameFlags) (Node, error)
	SetAttr(ctx context.Context, ino Ino, a SetAttr) (Node, error)
	SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags XattrFlags) error
	RemoveXattr(ctx context.Context, ino Ino, name string) error
	// Forget drops orphan fileID once the cleaner deleted its data.
	Forget(ctx context.Context, fileID string) error

	// Refresh makes the reads after it see every change stored (by any
	// mount) before it began. The mount calls it every ns_refresh, before
	// a lookup's miss once the mount was idle, and when a directory it
	// holds is gone (fs/fusefs). Every implementation has it: v1 reads its
	// log to the end; one that reads names from the store when used need
	// do no more than drop what it cached.
	Refresh(ctx context.Context) error
	// Close stops the background work and waits for the changes in flight.
	Close() error
}

// Sequenced is a namespace kept as one ordered log (v1): Seq is the seq of
// the last entry applied, so that a caller can tell whether a Refresh found
// anything (the mount's refresh loop backs off while nothing changes). A
// namespace without one log has no such number: the loop then backs off on
// the mount's use alone.
type Sequenced interface {
	Seq() uint64
}

// Counted is a namespace that knows how many nodes it holds without asking
// the store (v1 holds them all in memory): statfs shows it as the files in
// use. One that reads names on use cannot count them all; statfs then shows
// none in use.
type Counted interface {
	Nodes() int
}

// AttrsLater is a namespace that can land a change of attributes after the
// call returns (SetAttrLater, Kick: later.go), which the mount uses for the
// times of a file open on it. Without it the mount makes each change with
// SetAttr, stored before it returns.
type AttrsLater interface {
	SetAttrLater(ino Ino, a SetAttr) (Node, *Pending, error)
	Kick()
}

// The interfaces *Namespace implements, checked at compile time.
var (
	_ Names      = (*Namespace)(nil)
	_ Sequenced  = (*Namespace)(nil)
	_ Counted    = (*Namespace)(nil)
	_ AttrsLater = (*Namespace)(nil)
)
