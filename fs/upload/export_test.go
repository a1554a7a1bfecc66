package upload

// SetWaiting makes u call f whenever a request finds every slot taken,
// before it waits for one; held is how many slots are taken.
func SetWaiting(u *Uploader, f func(held int)) { u.waiting = f }

// Held is how many of u's slots are taken.
func Held(u *Uploader) int { return len(u.slots) }
