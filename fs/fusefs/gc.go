package fusefs

import (
	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/cleaner"
)

// gcWorkers bounds the orphans the background cleaner reaps at once: it
// runs beside the mount's own requests, at a lower priority.
const gcWorkers = 2

// startCleaner starts the background cleaner of a writable mount with
// gc on. It runs a pass every gc_interval while this mount holds the
// volume's cleaner lease (fs/cleaner/lease.go); Close stops it and waits.
// It holds no lock of the mount: it reads and writes the bucket only, as
// `ckptfs gc` does, under the same rules.
// On a namespace v2 volume it reads the orphan records and trims ns2/
// at the end of each sweep (fs/cleaner/nsv2.go), under the same lease.
func (fsys *FS) startCleaner() {
	c := fsys.cfg
	if c.ReadOnly || !c.GC {
		return
	}
	log := fsys.log.Named("gc")
	o := cleaner.BackgroundOptions{
		Options: cleaner.Options{Keep: c.GCKeep, KeepFor: c.GCKeepFor, Grace: c.GCGrace,
			MinAge: c.GCMinAge, NSLag: c.GCNSLag, Workers: gcWorkers, Open: fsys.isOpen},
		Interval:     c.GCInterval,
		VolumePolicy: true,
		MaxFiles:     c.GCFiles,
		Release:      requestBound(c),
		OnPass: func(rep *cleaner.Report, err error) {
			if err != nil {
				log.Warn("cleaner pass", zap.Error(err))
			}
			if rep == nil {
				return
			}
			if len(rep.Deleted) > 0 || len(rep.Orphans) > 0 {
				log.Info("cleaner pass", zap.Int("files", rep.Files), zap.Int("deleted", len(rep.Deleted)),
					zap.Int64("deleted_bytes", rep.DeletedBytes()), zap.Int("orphans", len(rep.Orphans)),
					zap.Int64("stored_bytes", rep.StoredBytes), zap.String("next", rep.Next))
			}
		},
	}
	fsys.gc = cleaner.StartBackground(fsys.st, fsys.root, o)
}

// stored is what the volume's files hold in the bucket as the background
// cleaner last counted it; ok is false when it has not yet.
func (fsys *FS) stored() (objects, bytes int64, ok bool) {
	if fsys.gc == nil {
		return 0, 0, false
	}
	return fsys.gc.Stored()
}

// isOpen says whether the file is open on this mount: the background
// cleaner does not reap an orphan a handle here still reads.
func (fsys *FS) isOpen(id string) bool {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	_, ok := fsys.files[id]
	return ok
}
