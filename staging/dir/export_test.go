package dir

// SetSyncHook makes d call hook before each fsync(2) of a folder, with the
// folder's path; an error from hook is the error of the fsync. Set it before
// d is used by more than one goroutine.
func SetSyncHook(d *Store, hook func(dir string) error) { d.syncHook = hook }

// SetListHook makes d call hook with the path of every folder a List
// reads. Set it before d is used by more than one goroutine.
func SetListHook(d *Store, hook func(dir string)) { d.listHook = hook }
