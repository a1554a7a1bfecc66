package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/blockmap"
	"github.com/ckptfs/ckptfs/fs/upload"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/fs/writermark"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/wal"
)

// noTruncate is minSize when the file was not truncated since its head.
const noTruncate = int64(math.MaxInt64)

// writeIDMeta is the metadata key that carries the unique id of a conditional
// write, so that a write whose answer was lost is recognised when resent.
const writeIDMeta = upload.WriteIDMeta

// ConflictPolicy says what a flush does when another writer published first.
type ConflictPolicy int

const (
	// ConflictRetry reloads, replays this writer's changes on the winner's
	// checkpoint and retries: the later writer wins.
	ConflictRetry ConflictPolicy = iota
	// ConflictFailFast returns a *ConflictError and rolls back to the winner.
	ConflictFailFast
)

// Params are the tunables the engine uses (package config maps mount options
// onto them).
type Params struct {
	Format        segment.Format // format of files created; an opened file keeps its own
	DataBlockSize int            // of files created
	MetaBlockSize int            // of files created
	// MaxObjectBytes caps every object (segment_max_object_bytes).
	MaxObjectBytes int64
	// ChunkSize is one multipart piece (segment_mpu_chunk_size).
	ChunkSize int64
	// Concurrency caps objects or pieces in flight (segment_mpu_max_concurrency).
	Concurrency int
	// StreamSegmentBytes is the target of objects sent ahead (0: none).
	StreamSegmentBytes int64
	// DirtyLimit bounds the dirty tier: crossing it writes a partial segment.
	DirtyLimit int64
	// ReadGetMaxBytes caps one ranged GET of the read path.
	ReadGetMaxBytes int64
	// ConflictPolicy is what a flush does on a conflicting writer.
	ConflictPolicy ConflictPolicy
	// CacheBytes bounds the cache of data blocks read from the store.
	CacheBytes int64
	// NodeCacheBytes bounds the cache of objects' index regions.
	NodeCacheBytes int64
	// MaxRetries bounds the attempts of a flush under ConflictRetry.
	MaxRetries int
	// WAL makes every change durable in the write-ahead log before it is
	// acknowledged (see wal.go); nothing is sent ahead then.
	WAL bool
	// WALBatchBytes caps one WAL record (0: package wal's default).
	WALBatchBytes int
	// WALMaxInFlight caps WAL records being stored at once (0: default).
	WALMaxInFlight int
	// WALLeaseTTL is how long a writer's lease on the WAL lasts unrenewed
	// (0: default).
	WALLeaseTTL time.Duration
	// EmbedMaxBytes is the largest part 0 a head carries a copy of (see
	// embed.go): a checkpoint of one object at most this long is stored
	// with its head at once and read back with the head alone. 0: 64 KiB,
	// or one data block's part 0 when that is larger (a one-block file of
	// 64 KiB blocks); negative: never. At most segment.MaxEmbedBytes.
	EmbedMaxBytes int64
}

// DefaultParams are the seed's defaults: with them nothing is sent ahead.
func DefaultParams() Params {
	return Params{
		Format:             segment.FormatStream,
		DataBlockSize:      4 << 10,
		MetaBlockSize:      4 << 10,
		MaxObjectBytes:     1 << 30,
		ChunkSize:          16 << 20,
		Concurrency:        8,
		StreamSegmentBytes: 1 << 30,
		DirtyLimit:         8 << 20,
		ReadGetMaxBytes:    16 << 20,
		ConflictPolicy:     ConflictRetry,
		CacheBytes:         64 << 20,
		NodeCacheBytes:     64 << 20,
		MaxRetries:         8,
	}
}

// Validate reports what is wrong with p.
func (p Params) Validate() error {
	var errs []error
	pow2 := func(n int) bool { return n > 0 && n&(n-1) == 0 }
	if !pow2(p.DataBlockSize) || p.DataBlockSize < 512 || p.DataBlockSize > 1<<20 {
		errs = append(errs, fmt.Errorf("data block size %d: want a power of two from 512 to 1M", p.DataBlockSize))
	}
	if !pow2(p.MetaBlockSize) || p.MetaBlockSize < 256 || p.MetaBlockSize > 64<<10 {
		errs = append(errs, fmt.Errorf("meta block size %d: want a power of two from 256 to 64K", p.MetaBlockSize))
	}
	if p.MaxObjectBytes <= 0 || p.MaxObjectBytes > segment.MaxObjectBytes {
		errs = append(errs, fmt.Errorf("max object bytes %d: want 1..%d", p.MaxObjectBytes, segment.MaxObjectBytes))
	}
	if p.ChunkSize < staging.MinPartSize {
		errs = append(errs, fmt.Errorf("chunk size %d: want at least %d", p.ChunkSize, staging.MinPartSize))
	}
	if p.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency %d: want at least 1", p.Concurrency))
	}
	if p.DirtyLimit < int64(p.DataBlockSize) {
		errs = append(errs, fmt.Errorf("dirty limit %d: want at least one data block", p.DirtyLimit))
	}
	if p.ReadGetMaxBytes < int64(p.DataBlockSize) {
		errs = append(errs, fmt.Errorf("read get max bytes %d: want at least one data block", p.ReadGetMaxBytes))
	}
	if p.EmbedMaxBytes > segment.MaxEmbedBytes {
		errs = append(errs, fmt.Errorf("embed max bytes %d: want at most %d", p.EmbedMaxBytes, segment.MaxEmbedBytes))
	}
	if p.Format != segment.FormatStream && p.Format != segment.FormatParted {
		errs = append(errs, fmt.Errorf("format %v: want stream or parted", p.Format))
	}
	return errors.Join(errs...)
}

// Errors a caller decides on.
var (
	// ErrConflict: another writer published a checkpoint first (failfast).
	ErrConflict = errors.New("conflicting writer")
	// ErrReadOnly: the file was opened at a given checkpoint.
	ErrReadOnly = errors.New("file is read-only")
	// ErrClosed: the file was closed.
	ErrClosed = errors.New("file is closed")
	// ErrExists: Create found a file already at the prefix.
	ErrExists = errors.New("file exists")
	// ErrNotExist: no file (or no such checkpoint) at the prefix.
	ErrNotExist = errors.New("file does not exist")
	// ErrInvalid: a bad offset or size.
	ErrInvalid = errors.New("invalid argument")
	// ErrObjectTooLarge: an object of a checkpoint would exceed
	// segment_max_object_bytes (part 0's index nodes do not fit).
	ErrObjectTooLarge = errors.New("object over segment_max_object_bytes")
	// ErrLost: changes not yet in a checkpoint were dropped by a rollback
	// (a conflict under ConflictFailFast, or Rollback); see Losses.
	ErrLost = errors.New("unflushed changes were dropped by a rollback")
)

// ConflictError says who won.
type ConflictError struct {
	Prefix string
	Ours   uint64        // the checkpoint number this writer tried
	Theirs segment.Inode // the winner's inode, now loaded
	head   segment.Head  // the winner's head (Theirs with its count and copy of part 0)
	etag   string        // the winner's head ETag
	// walApplied is the last WAL record the winner's checkpoint holds;
	// walTracked, that its head says the file is written with the WAL.
	walApplied uint64
	walTracked bool
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("flush %s: checkpoint %d conflicts with checkpoint %d published by another writer",
		e.Prefix, e.Ours, e.Theirs.Cno)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// Stat is what the file looks like now.
type Stat struct {
	Size       int64
	Cno        uint64 // last published checkpoint (0: none yet)
	Format     segment.Format
	BlockSize  int
	Dirty      bool // something is not yet in a published checkpoint
	DirtyBytes int64
	Mtime      time.Time
	ReadOnly   bool
	// Blocks is the number of data blocks the file stores (mapped in its
	// block map) or holds dirty to store: what it occupies, in BlockSize
	// units. When BlocksKnown is false (a head written before the count was
	// recorded, not yet counted) it is the size's figure, ceil(Size/BlockSize).
	Blocks      uint64
	BlocksKnown bool
	// Version names the content shown: the checkpoint and the last WAL
	// record applied over it (refresh.go).
	Version Version
}

// File is one checkpointed file. Its methods are safe for concurrent use.
type File struct {
	st     staging.Store
	up     *upload.Uploader // every object's upload, under segment_mpu_max_concurrency
	prefix string
	tag    uint64
	p      Params
	// opts are the options f was made with (walunder.go opens the file
	// again with them).
	opts   Options
	log    *zap.Logger
	loader *blockmap.ObjectLoader
	// space says whose objects the map's names are (volume.ObjectSpace); linCno is
	// the lineage of the map f reads now (its head's, carried by every
	// checkpoint built on it), 0 for none.
	space  *volume.ObjectSpace
	linCno atomic.Uint64
	cache  *blockCache
	// foreign counts the times f took content that its own writes did not
	// make (ForeignChanges).
	foreign atomic.Uint64
	// rd follows sequential readers, fetches ahead of them and shares GETs
	// between reads (prefetch.go).
	rd readers
	// hint is the load of the map Open started from Options.MapHint, with
	// the layout the loader was made for (maphint.go); set before Open
	// returns, never after.
	hint       hintWarm
	hintFormat segment.Format
	hintMBS    uint32

	// flushMu: Flush holds it exclusively for its whole length; every
	// change but a write by value at an offset (WriteAt) and SetMtime, and
	// every operation that takes every block (lockAll), hold it shared for
	// theirs. So while a Flush runs, only reads, WriteAt and SetMtime go on
	// (doc.go, Locking). Taken with nothing held but walState.markMu; a
	// change with a context leaves its wait when the context ends.
	flushMu flushLock
	// ranges orders operations on blocks: taken before mu, never inside it.
	ranges rangeLock
	// copiers counts writes copying their bytes (without mu) now;
	// maxCopiers is the most there ever were at once.
	copiers, maxCopiers atomic.Int64
	copyHook            func() // tests: runs in every write's copy phase
	planHook            func() // tests: runs as a flush plans, without mu when unlocked
	sliceHook           func() // tests: runs between slices of dirtySliceShared, without mu
	noUnlockChecks      bool   // tests: no invariant check at unlock (a benchmark of waits)
	noArenas            bool   // tests: every dirty block's buffer from the pool

	// mu: readers shared, everything that changes state exclusive. Its
	// Unlock publishes stat first.
	mu stateMu
	// stat is what Stat returns: the state at the end of the last exclusive
	// hold of mu. A flush may hold mu while it settles uploads or merges; a
	// stat (the kernel's getattr of an open file) reads this instead of
	// waiting for it.
	stat atomic.Pointer[Stat]
	// mark is what Refresh looks at first, published with stat, so that a
	// refresh that finds nothing to do never waits for mu (refresh.go).
	mark atomic.Pointer[refreshMark]

	// readOnly and pinned (opened at a checkpoint, OpenAt: never moves)
	// are set by Open before it returns, never after: read without mu.
	readOnly bool
	pinned   bool

	// GUARDED_BY(mu); format and the block sizes change only when a file
	// made empty adopts the first head another mount published (adopt).
	format segment.Format
	bs     int // data block size
	mbs    int // meta block size
	closed bool
	size   int64
	mtime  time.Time
	tree   *blockmap.Tree
	// dirty is the dirty tier: blocks not in a completed object yet.
	// INVARIANT: every block holds exactly one of buf (one data block
	// long) and ref.
	// INVARIANT: dirty is not empty only if changed, or the blocks are
	// another writer's records shown read-only (w.overlay), or they are
	// all busy: a first write prepared them and is copying (changed is set
	// when it is done).
	dirty map[uint64]*dirtyBlock
	// dirtyB is the bytes held by dirty blocks.
	// INVARIANT: dirtyB == bs * (the dirty blocks with a buf); blocks by
	// reference hold no buffer and count nothing.
	dirtyB  int64
	changed bool // size, mtime or map differ from the head
	// dirtyUnmapped counts dirty blocks marked unmapped (not in the map
	// when they became dirty, and not placed in it since): Stat's Blocks is
	// the map's count plus these.
	// INVARIANT: dirtyUnmapped == the dirty blocks with unmapped set.
	dirtyUnmapped int64

	// gate is set while a Flush has let go of mu (pubGate): writes wait
	// for it, or go on past the blocks the flush holds (gate.writes).
	gate *pubGate

	// head is the published checkpoint this writer builds on.
	head     segment.Inode
	headETag string
	// headCount is the data blocks head's checkpoint stores, as its head
	// records it (known false: a version 1 head).
	headCount blockCount
	// embed is the copy of a part 0 a head carries, while it matters: the
	// head's, or one an older head of this writer carried whose object is
	// not known to be stored yet (embed.go).
	embed *embedObj

	// Since head: what this writer did, replayed onto a winner's checkpoint
	// under ConflictRetry. written holds blocks moved from the dirty tier into
	// objects; zeroed holds blocks turned into holes; minSize is the smallest
	// size a truncate gave the file (noTruncate: none). partial, writeEnd
	// and zeroPast are the rest of what a merge needs (merge.go).
	written map[uint64]blockmap.Value
	zeroed  map[uint64]struct{}
	minSize int64
	partial map[uint64]*setBytes
	// writeEnd is the furthest end of a write. zeroAfter are the ranges
	// zeroed past this writer's size (at the time), which a merge zeroes in
	// the winner's bytes; past maxZeroAfter of them, zeroPast is the lowest
	// offset they reached and a merge onto bytes there gives way
	// (noTruncate: none).
	writeEnd  int64
	zeroAfter []byteRange
	zeroPast  int64
	// edits counts the changes recorded for a merge (merge.go); appends
	// is the run of appends made last, which a merge places at the end of
	// the winner's file.
	edits   uint64
	appends appendRun

	// The checkpoint being built.
	pendingCno uint64 // 0: not taken yet
	nextPart   uint32 // next part number >= 1 for data objects
	// usedCno is the highest checkpoint number this writer named an object
	// with; it survives rollbacks, so names taken are never taken again.
	usedCno uint64
	// leafImages maps the xxh3 of a leaf's bytes stored in a completed object
	// of the pending checkpoint to where it is, so an unchanged leaf is not
	// written again.
	leafImages map[uint64]segment.Ptr

	budget *Budget // shared with the mount's other files; may be nil
	// streams are the sequential streams of writes followed, by where each
	// ends; tick orders them for eviction.
	streams map[int64]*seqStream
	tick    uint64

	// s is the send-ahead state (StreamSegment with stream_segment_bytes > 0).
	s *sender

	// w is the write-ahead log's state; pubs counts WAL publishes running;
	// walShared counts records with the mount's other files (may be nil).
	w         walState
	pubs      sync.WaitGroup
	walShared *wal.Counters

	// losses counts rollbacks that dropped changes not yet in a checkpoint.
	losses atomic.Uint64

	stats Stats

	// wm is the writer marker that shows the cleaner what this writer may
	// still publish (writers.go).
	wm *writermark.Keeper
}

// publishStatLocked stores the state Stat returns; the caller holds mu
// exclusively (or owns f alone).
func (f *File) publishStatLocked() {
	s := Stat{
		Size:       f.size,
		Cno:        f.head.Cno,
		Format:     f.format,
		BlockSize:  f.bs,
		Dirty:      f.changed || f.w.failed != nil,
		DirtyBytes: f.dirtyB,
		Mtime:      f.mtime,
		ReadOnly:   f.readOnly,
		Version:    Version{Cno: f.head.Cno, WAL: f.w.seq},
	}
	if f.bs > 0 {
		s.Blocks = uint64((f.size + int64(f.bs) - 1) / int64(f.bs))
	}
	if f.tree != nil {
		if n, known := f.tree.Len(); known {
			s.Blocks, s.BlocksKnown = uint64(max(n+f.dirtyUnmapped, 0)), true
		}
	}
	m := f.refreshMarkLocked()
	if old := f.mark.Load(); old == nil || *old != m {
		f.mark.Store(&m)
	}
	if old := f.stat.Load(); old != nil && *old == s {
		return
	}
	f.stat.Store(&s)
}

// dirtyBlock is one block's bytes that are not in a completed object yet.
type dirtyBlock struct {
	buf []byte  // exactly one data block; nil for a reference
	ref *refSrc // a block written by reference: its bytes are in a Source
	// sent is the object sent ahead that holds a copy of the block at slot,
	// until that object finishes; nil when the block is unsent.
	// INVARIANT: sent is nil or an object in flight (sender.objs) whose
	// slot holds this block.
	sent *streamObj
	slot uint32
	// busy counts writes copying into buf right now (without File.mu):
	// nothing else reads or frees buf meanwhile.
	busy int
	// seq is the sequential stream of writes that last wrote the block: a
	// block of a long stream goes with runs, others with scattered blocks.
	seq *seqStream
	// unmapped: the block was not in the map when it became dirty and has
	// not been placed in it since (counted in File.dirtyUnmapped).
	unmapped bool
	// gen counts the changes to the block (sender.touchLocked): an object
	// sent ahead holds the block's bytes as they were at the gen it
	// recorded, so a block whose gen moved since is still dirty.
	gen uint64
	// crc is the checksum of buf, computed by the write that filled it
	// whole while its bytes were in the CPU's cache; valid until the block
	// changes again (touchLocked).
	crc      uint32
	crcValid bool
	// arena: buf is this block's slot in a stream's arena (arena.go), which
	// it holds a reference on; nil for a buffer from the pool.
	// INVARIANT: buf is arena.buf's slot fbn - arena.first.
	arena *arena
}

// seqStream is a run of writes each starting where the last one ended.
type seqStream struct {
	end   int64  // where the next write must start to extend it
	bytes int64  // bytes written in it
	last  uint64 // when it was last extended (File.tick)
	fill  *arena // the arena its new blocks are carved from (arena.go)
}

// Stats are cumulative counters of one file.
type Stats struct {
	// ParallelWrites is the most writes that copied their bytes at once.
	ParallelWrites int
	Flushes        int
	Partials       int   // partial segments written under dirty pressure
	Conflicts      int   // conflicts seen
	BytesWritten   int64 // by WriteAt
	BytesUploaded  int64 // object bytes stored
	ObjectsWritten int
	Clones         int // checkpoints made as copies by reference (CloneFrom)
	// PieceCopyBytes: data sending ahead copied into piece buffers; the
	// rest of what it sent went from the blocks' arenas (arena.go).
	PieceCopyBytes int64
	LastFlush      FlushTiming
	// WAL counts the write-ahead log's records since the file took its
	// lease (zero without the WAL).
	WAL wal.Stats
}

// FlushTiming is what one flush did. The stream_* counters are the seed's.
type FlushTiming struct {
	Cno      uint64
	Attempts int
	Objects  int // objects written by this flush (part 0 included)
	// StreamSentBytes: data sent ahead before the flush (in objects that
	// completed) since the last checkpoint.
	StreamSentBytes int64
	// StreamDeadBytes: data sent ahead that died before its object counted.
	StreamDeadBytes int64
	// StreamFlushBytes: data written by the flush itself.
	StreamFlushBytes int64
	// StreamMetaBytes: index nodes, summaries and headers the flush wrote.
	StreamMetaBytes int64
	Requests        int // store requests the flush made
	Plan            time.Duration
	Data            time.Duration // uploading data parts
	Part0           time.Duration
	Head            time.Duration
	Total           time.Duration
}

func (p Params) withDefaults() Params {
	d := DefaultParams()
	if p.Format == 0 {
		p.Format = d.Format
	}
	if p.DataBlockSize == 0 {
		p.DataBlockSize = d.DataBlockSize
	}
	if p.MetaBlockSize == 0 {
		p.MetaBlockSize = d.MetaBlockSize
	}
	if p.MaxObjectBytes == 0 {
		p.MaxObjectBytes = d.MaxObjectBytes
	}
	if p.ChunkSize == 0 {
		p.ChunkSize = d.ChunkSize
	}
	if p.Concurrency == 0 {
		p.Concurrency = d.Concurrency
	}
	if p.DirtyLimit == 0 {
		p.DirtyLimit = d.DirtyLimit
	}
	if p.ReadGetMaxBytes == 0 {
		p.ReadGetMaxBytes = d.ReadGetMaxBytes
	}
	if p.CacheBytes == 0 {
		p.CacheBytes = d.CacheBytes
	}
	if p.NodeCacheBytes == 0 {
		p.NodeCacheBytes = d.NodeCacheBytes
	}
	if p.MaxRetries == 0 {
		p.MaxRetries = d.MaxRetries
	}
	return p
}

// Options of Create and Open.
type Options struct {
	Params Params
	// FileID names the file; objects carry its tag so that an object copied
	// under another file is refused.
	FileID string
	// FilesPrefix is where the volume keeps its files (the file with id X
	// at FilesPrefix + X + "/"): a copy by reference reads objects of other
	// files there. Empty: the prefix, less FileID + "/" when it ends so.
	FilesPrefix string
	Logger      *zap.Logger
	// Budget, when set, is the memory budget this file shares with the other
	// files of a mount.
	Budget *Budget
	// MapHint, when set, is where the caller last saw the file's map: Open
	// loads the path to its first block while it reads the head
	// (maphint.go).
	MapHint *MapHint
	// WALCounters, when set, counts this file's WAL records with the other
	// files of a mount.
	WALCounters *wal.Counters
	// Clock is the time of the writer marker (writers.go); nil: the system
	// clock.
	Clock Clock
	// ReadOnly opens the file at its head for reading only: nothing is
	// written, and WAL records after the head, a live writer's or those a
	// crashed one left, are shown (applied in memory) but never replayed
	// into a checkpoint (a read-only mount, or a tool that inspects a
	// volume, must not change it, and must show every acknowledged write).
	ReadOnly bool
	// StoreHead has Create store the new file's empty head at once, with
	// If-None-Match, as with the WAL: a file id is then created once, and a
	// named file whose head is missing was removed, not never written.
	StoreHead bool
}

func newFile(st staging.Store, prefix string, o Options) (*File, error) {
	p := o.Params.withDefaults()
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("file %s: %w", prefix, err)
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	f := &File{
		prefix:     prefix,
		tag:        segment.FileTag(o.FileID),
		p:          p,
		opts:       o,
		log:        log,
		cache:      newBlockCache(p.CacheBytes, o.Budget),
		budget:     o.Budget,
		walShared:  o.WALCounters,
		streams:    make(map[int64]*seqStream),
		dirty:      make(map[uint64]*dirtyBlock),
		written:    make(map[uint64]blockmap.Value),
		zeroed:     make(map[uint64]struct{}),
		leafImages: make(map[uint64]segment.Ptr),
		nextPart:   1,
	}
	f.mu.f = f
	if h := testHooks.store; h != nil {
		st = h(f, st)
	}
	f.st = st
	f.up = upload.New(upload.Config{Store: st, Concurrency: f.p.Concurrency, ChunkSize: f.p.ChunkSize, Log: log,
		Hooks: upload.Hooks{Alloc: func(n int) []byte { return allocPiece(n, 0) }, Free: freePiece,
			Hold: f.forceCopy, Release: f.releaseCopy}})
	f.space = volume.NewObjectSpace(st, o.FilesPrefix, o.FileID, prefix)
	f.rd.init(f, o.Budget)
	f.w.f = f
	f.w.pubCtx, f.w.pubCancel = context.WithCancel(context.Background())
	f.s = newSender(f)
	f.wm = writermark.NewKeeper(st, prefix, o.Clock, log, &f.s.requests)
	f.publishStatLocked()
	return f, nil
}

// Create makes a new, empty file at prefix (with o.Params' format and block
// sizes). Without the WAL it sends nothing: the caller has just named a new
// file id, so no head can be there; the first publish creates the head with
// If-None-Match (a head found there then is another writer's: a conflict),
// and a file closed unwritten stores nothing. With the WAL or
// Options.StoreHead it creates the head now (marked as written with the WAL)
// and fails with ErrExists if a head is already there.
func Create(ctx context.Context, st staging.Store, prefix string, o Options) (*File, error) {
	f, err := newFile(st, prefix, o)
	if err != nil {
		return nil, err
	}
	ino := segment.Inode{
		Format:        f.p.Format,
		DataBlockSize: uint32(f.p.DataBlockSize),
		MetaBlockSize: uint32(f.p.MetaBlockSize),
		MtimeNs:       time.Now().UnixNano(),
	}
	if !f.p.WAL && !o.StoreHead {
		// The head cannot exist: the namespace has just made this file id.
		// Nothing is sent; the first publish creates the head with
		// If-None-Match (putHead with no ETag), and a file closed unwritten
		// stores nothing (a missing head reads as an empty file).
		f.adopt(ino, "")
		f.headCount = blockCount{cno: 0, known: true}
		f.tree.SetLen(0)
		f.publishStatLocked()
		return f, nil
	}
	// With the WAL the head is created now, marked as written with it: the
	// lease and an opener's replay look for records because of it.
	id := newWriteID()
	meta := map[string]string{writeIDMeta: id}
	if f.p.WAL {
		if err := walExists(ctx, f.st, prefix); err != nil {
			return nil, err
		}
		wal.MarkHead(meta, 0)
	}
	head, err := segment.EncodeHead(segment.Head{FileTag: f.tag, Inode: ino, BlocksKnown: true})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", prefix, err)
	}
	info, err := f.st.Put(ctx, volume.HeadKey(prefix), head, staging.PutOptions{
		Conditions: staging.Conditions{IfNoneMatch: true},
		Metadata:   meta,
	})
	if err != nil {
		// A lost answer, resent by the client, is refused as a precondition
		// failure by our own head: our write id on it means it landed.
		hinfo, herr := f.st.Head(ctx, volume.HeadKey(prefix))
		switch {
		case herr == nil && hinfo.Metadata[writeIDMeta] == id && hinfo.Size == int64(len(head)):
			info = hinfo
		case errors.Is(err, staging.ErrPrecondition):
			return nil, fmt.Errorf("create %s: %w", prefix, ErrExists)
		default:
			return nil, fmt.Errorf("create %s: %w", prefix, err)
		}
	}
	f.adoptHead(segment.Head{FileTag: f.tag, Inode: ino, BlocksKnown: true}, info.ETag)
	f.w.tracked = f.p.WAL
	f.publishStatLocked()
	return f, nil
}

// Open opens the file at prefix at its latest checkpoint, for reading and
// writing.
func Open(ctx context.Context, st staging.Store, prefix string, o Options) (*File, error) {
	f, err := newFile(st, prefix, o)
	if err != nil {
		return nil, err
	}
	if o.MapHint != nil {
		f.warmFromHint(*o.MapHint)
	}
	hd, info, err := f.readHead(ctx)
	if err != nil {
		f.stopHint()
		return nil, err
	}
	f.keepHintLoader(hd.Inode)
	f.adoptHead(hd, info.ETag)
	f.w.applied, f.w.tracked, err = wal.HeadApplied(info.Metadata)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", prefix, err)
	}
	f.w.seq = f.w.applied
	if o.ReadOnly {
		f.readOnly = true
		if err := f.openReplay(ctx); err != nil {
			f.Close()
			return nil, err
		}
		f.publishStatLocked()
		return f, nil
	}
	// Changes a crashed writer logged but did not publish are replayed now.
	if err := f.openReplay(ctx); err != nil {
		f.Close()
		return nil, err
	}
	// A publish the replay started may be running: publish under mu.
	f.mu.Lock()
	f.mu.Unlock()
	return f, nil
}

// OpenAt opens the file at checkpoint cno, read-only, straight from that
// checkpoint's part 0 (one header read). Checkpoints lists the published
// ones; a part 0 whose flush failed before the head named it is a whole,
// consistent checkpoint too, and opens the same way.
func OpenAt(ctx context.Context, st staging.Store, prefix string, cno uint64, o Options) (*File, error) {
	f, err := newFile(st, prefix, o)
	if err != nil {
		return nil, err
	}
	hd, _, err := f.readHead(ctx)
	if err != nil {
		return nil, err
	}
	head := hd.Inode
	if cno == 0 || cno > head.Cno {
		return nil, fmt.Errorf("open %s at checkpoint %d: %w", prefix, cno, ErrNotExist)
	}
	if cno == head.Cno {
		// The head's checkpoint, read from its embedded part 0 if it has one.
		f.adoptHead(hd, "")
		f.readOnly, f.pinned = true, true
		f.publishStatLocked()
		return f, nil
	}
	name := segment.ObjectName{Cno: cno, Part: 0}
	h, err := segment.ReadHeader(ctx, f.st, f.key(name), name, f.tag, head.Format)
	if errors.Is(err, staging.ErrNotFound) {
		return nil, fmt.Errorf("open %s at checkpoint %d: %w", prefix, cno, ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s at checkpoint %d: %w", prefix, cno, err)
	}
	f.adopt(h.Inode, "")
	f.readOnly, f.pinned = true, true
	f.publishStatLocked()
	return f, nil
}

// readHead reads and decodes the head object (with its embedded part 0).
func (f *File) readHead(ctx context.Context) (segment.Head, staging.ObjectInfo, error) {
	hd, info, err := segment.ReadHead(ctx, f.st, volume.HeadKey(f.prefix), f.tag)
	if errors.Is(err, staging.ErrNotFound) {
		return segment.Head{}, info, fmt.Errorf("open %s: %w", f.prefix, ErrNotExist)
	}
	if err != nil {
		return segment.Head{}, info, fmt.Errorf("open %s: %w", f.prefix, err)
	}
	return hd, info, nil
}

// Checkpoint is one published checkpoint.
type Checkpoint struct {
	Inode segment.Inode
	Base  segment.Inode // the inode it was built on
}

// Checkpoints lists the published checkpoints, newest first, by following the
// chain from the head through each part 0's base inode. A checkpoint whose
// part 0 is gone (the cleaner removed it) ends the chain.
func (f *File) Checkpoints(ctx context.Context) ([]Checkpoint, error) {
	return f.checkpointsFrom(ctx, 0)
}

func (f *File) checkpointsFrom(ctx context.Context, limit int) ([]Checkpoint, error) {
	hd, _, err := f.readHead(ctx)
	if err != nil {
		return nil, err
	}
	ino := hd.Inode
	var out []Checkpoint
	for ino.Cno != 0 {
		name := segment.ObjectName{Cno: ino.Cno, Part: 0}
		if len(hd.Embed) > 0 && ino.Cno == hd.Inode.Cno {
			// The head carries its part 0 (which may not be stored yet).
			out = append(out, Checkpoint{Inode: hd.Part0.Inode, Base: hd.Part0.Base})
			if limit > 0 && len(out) >= limit {
				break
			}
			ino = hd.Part0.Base
			continue
		}
		h, err := segment.ReadHeader(ctx, f.st, f.prefix+name.String(), name, f.tag, ino.Format)
		if errors.Is(err, staging.ErrNotFound) && len(out) > 0 {
			break
		}
		if err != nil {
			return out, fmt.Errorf("checkpoints of %s: %w", f.prefix, err)
		}
		out = append(out, Checkpoint{Inode: h.Inode, Base: h.Base})
		if limit > 0 && len(out) >= limit {
			break
		}
		ino = h.Base
	}
	return out, nil
}

// adopt makes ino (with head ETag etag) the state of f: nothing dirty.
// Callers hold mu exclusively (or own f alone).
func (f *File) adopt(ino segment.Inode, etag string) {
	f.foreign.Add(1)
	f.format = ino.Format
	f.bs = int(ino.DataBlockSize)
	f.mbs = int(ino.MetaBlockSize)
	f.size = int64(ino.Size)
	f.mtime = time.Unix(0, ino.MtimeNs)
	f.head = ino
	f.headETag = etag
	// A File made empty in this mount's format (a file with no head yet)
	// takes the format of the first head another mount published: its
	// objects are read as that format lays them out.
	if f.loader != nil && f.loader.Format() != ino.Format {
		f.loader = nil
	}
	if f.loader == nil {
		f.loader = blockmap.NewResolvingLoader(f.st, f.prefix, f.tag, f.resolveObject, f.format, f.p.NodeCacheBytes)
	}
	if old := f.linCno.Swap(ino.Lineage); old != ino.Lineage {
		// The same names are other objects now.
		f.loader.Clear()
	}
	f.tree = f.openTree(ino)
	f.s.resetLocked(context.Background())
	f.w.unpinLocked()
	// The map now may name objects this writer never saw under names whose
	// bytes it cached (an object no checkpoint used, removed by the
	// cleaner, and the name created again).
	f.cache.clear()
	f.rd.reset()
	f.w.failed = nil
	for _, d := range f.dirty {
		f.freeDirtyBuf(d)
	}
	f.endFillsLocked()
	f.dirty = make(map[uint64]*dirtyBlock)
	f.dirtyB = 0
	f.dirtyUnmapped = 0
	f.changed = false
	f.resetSince()
}

// openTree opens the block map of ino, telling it its count when the head
// of that checkpoint recorded it.
func (f *File) openTree(ino segment.Inode) *blockmap.Tree {
	bo := blockmap.Options{MetaBlockSize: f.mbs}
	if ino.Height == 0 {
		return blockmap.New(bo, f.loader)
	}
	t := blockmap.Open(bo, f.loader, ino.Root, int(ino.Height))
	if f.headCount.known && f.headCount.cno == ino.Cno {
		t.SetLen(f.headCount.n)
	}
	return t
}

// blockCount is the data blocks checkpoint cno stores, when known.
type blockCount struct {
	cno   uint64
	n     int64
	known bool
}

// adoptHead makes the head hd (with ETag etag) the state of f: adopt, with
// what the head records besides its inode (its count of blocks, its
// embedded part 0). Callers hold mu exclusively (or own f alone).
func (f *File) adoptHead(hd segment.Head, etag string) {
	f.headCount = blockCount{cno: hd.Inode.Cno, n: int64(hd.Blocks), known: hd.BlocksKnown}
	f.adopt(hd.Inode, etag)
	f.setEmbedLocked(embedOf(hd))
}

// resetSince forgets what was done since the head (after a publish).
func (f *File) resetSince() {
	f.resetRecords()
	f.s.unsent = make(map[uint64]struct{})
	f.s.unsentB = 0
	f.resetPending()
}

// resetPending forgets the checkpoint being built, once one is published
// (the records of changes since the head and the blocks left unsent are the
// caller's).
func (f *File) resetPending() {
	f.pendingCno = 0
	f.nextPart = 1
	f.leafImages = make(map[uint64]segment.Ptr)
	f.s.sentB, f.s.deadB, f.s.flushB = 0, 0, 0
}

// ForeignChanges counts the times the file's content changed other than by
// its own writes and truncates: it took a head (the open, a rollback, a
// reload, a copy by reference) or merged another writer's checkpoint into
// its own. A cache of the file's bytes filled through f (the kernel's pages)
// is exact while the count stays where it was when the cache was known
// exact; once it moves, some cached bytes may be of another checkpoint.
func (f *File) ForeignChanges() uint64 { return f.foreign.Load() }

// Stat returns the file's state as the last change left it. It never waits
// for mu: a flush in progress shows the state before it (Dirty, the old
// checkpoint) until it completes.
func (f *File) Stat() Stat {
	return *f.stat.Load()
}

// Losses counts the rollbacks that dropped changes not yet in a checkpoint
// (a conflict under ConflictFailFast, or Rollback). Every user of the file
// that may have made such changes (each open file description) remembers
// the count it last saw: a count that moved means changes were lost, and its
// next fsync or close must fail (ErrLost), even though the file is clean
// again and a flush now succeeds.
func (f *File) Losses() uint64 { return f.losses.Load() }

// Size is the file's size now; like Stat, it never waits for mu.
func (f *File) Size() int64 {
	return f.stat.Load().Size
}

// Stats returns the cumulative counters.
func (f *File) Stats() Stats {
	f.mu.RLock()
	st := f.stats
	f.mu.RUnlock()
	st.ParallelWrites = int(f.maxCopiers.Load())
	// logMu is taken before mu elsewhere: never inside it.
	f.w.logMu.Lock()
	if f.w.log != nil {
		st.WAL = f.w.log.Stats()
	}
	f.w.logMu.Unlock()
	return st
}

// SetMtime sets the modification time the next checkpoint records.
func (f *File) SetMtime(ctx context.Context, t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writable(); err != nil {
		return err
	}
	if err := f.logLocked(ctx, wal.Op{Kind: wal.OpMtime, MtimeNs: t.UnixNano()}); err != nil {
		return err
	}
	f.mtime = t
	f.changed = true
	return nil
}

// Close releases the file without flushing (the caller flushes first when it
// wants a checkpoint): what is dirty is dropped.
//
// With the WAL on, Close waits for a publish in flight, then releases the
// log's lease; what it drops is in the log and replays at the next open.
// Each wait on the store is bounded by closeWait (the lease's TTL): a publish
// that has not landed by then is cancelled (its records stay in the log, and
// the next open replays them), and a lease not released by then expires.
func (f *File) Close() error {
	f.w.closing()
	ctx, cancel := context.WithTimeout(context.Background(), f.w.closeWait())
	unlock, err := f.lockAll(ctx)
	cancel()
	if err != nil {
		f.log.Warn("close: a write-ahead log publish did not land in time; cancelled, its records replay at the next open",
			zap.String("file", f.prefix), zap.Duration("waited", f.w.closeWait()))
		// A cancelled publish returns as soon as its request does.
		f.w.pubCancel()
		unlock, _ = f.lockAll(context.Background())
	}
	if f.closed {
		unlock()
		return nil
	}
	f.w.recoverAtCloseLocked()
	f.closed = true
	f.s.stop()
	for _, d := range f.dirty {
		f.freeDirtyBuf(d)
	}
	f.endFillsLocked()
	f.dirty = nil
	f.dirtyB = 0
	f.dirtyUnmapped = 0
	f.w.unpinLocked()
	f.rd.reset()
	f.cache.clear() // its budget goes back to the mount
	unlock()
	f.rd.wg.Wait() // the reads ahead just ended
	f.up.Wait()    // a part 0 put with its head (none: no flush runs now)
	f.stopHint()
	f.wm.Close() // what it protected is published or given up
	f.w.close()
	return nil
}

func (f *File) writable() error {
	if f.closed {
		return fmt.Errorf("%s: %w", f.prefix, ErrClosed)
	}
	if f.readOnly {
		return fmt.Errorf("%s at checkpoint %d: %w", f.prefix, f.head.Cno, ErrReadOnly)
	}
	return nil
}

func (f *File) key(n segment.ObjectName) string { return f.prefix + n.String() }

// resolveObject is where the object name of f's map lies, and its tag: f's
// own, or that of a file f was copied from (volume.ObjectSpace).
func (f *File) resolveObject(ctx context.Context, n segment.ObjectName) (string, uint64, error) {
	return f.space.Key(ctx, f.linCno.Load(), n)
}

// readKey is the key a read of object n of f's map gets.
func (f *File) readKey(ctx context.Context, n segment.ObjectName) (string, error) {
	key, _, err := f.resolveObject(ctx, n)
	return key, err
}
