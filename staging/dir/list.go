package dir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ckptfs/ckptfs/staging"
)

// List returns the objects under prefix after startAfter in key order,
// walking the folders lazily: each folder is read once, its entries are
// sorted by the keys they hold (an object "<name>~meta" holds one key, a
// folder <name> every key starting with "<name>/": sorting objects by key and
// folders by that prefix is the order of the keys themselves), folders whose
// every key is at or before startAfter, or outside prefix, are skipped
// unread, and the walk stops at the first key past a full page. A page
// thus costs the folders on the path to startAfter and those the page's
// keys are in, whatever the number of keys before or after them; only a
// single folder of many entries is read (names only) and sorted whole.
func (d *Store) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	max, err := staging.CheckList(ctx, "list", prefix, max)
	if err != nil {
		return staging.ListPage{}, err
	}
	// The folder of the prefix's whole segments, and the key prefix it holds.
	start, startKey := d.root, ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		segs := strings.Split(prefix[:i], "/")
		for j, s := range segs {
			segs[j] = escapeSeg(s)
		}
		start = filepath.Join(append([]string{d.root}, segs...)...)
		startKey = prefix[:i+1]
	}
	l := dirLister{d: d, ctx: ctx, prefix: prefix, startAfter: startAfter, max: max}
	if err := l.walk(start, startKey); err != nil && !errors.Is(err, errPageFull) {
		return staging.ListPage{}, fmt.Errorf("list %s: %w", prefix, err)
	}
	return l.page, nil
}

// errPageFull stops a listing's walk once a key past a full page is found.
var errPageFull = errors.New("page full")

// dirLister is the state of one List.
type dirLister struct {
	d          *Store
	ctx        context.Context
	prefix     string
	startAfter string
	max        int
	page       staging.ListPage
}

// dirItem is one entry of a folder that a listing may need.
type dirItem struct {
	key    string // an object's key, or the prefix (ending in '/') of a folder's keys
	name   string // the file (commit record) or folder name
	folder bool
}

// walk lists, in key order, the objects of folder dir, whose keys start with
// keyPrefix. It returns errPageFull when the page is full and another key
// follows.
func (l *dirLister) walk(dir, keyPrefix string) error {
	items, err := l.d.readFolder(dir, keyPrefix, l.prefix, l.startAfter)
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		if it.folder {
			if err := l.walk(filepath.Join(dir, it.name), it.key); err != nil {
				return err
			}
			continue
		}
		if len(l.page.Objects) == l.max {
			l.page.Truncated = true
			return errPageFull
		}
		m, err := l.d.readMeta(objPath{key: it.key, dir: dir, base: strings.TrimSuffix(it.name, metaSuffix)})
		if errors.Is(err, staging.ErrNotFound) {
			continue // deleted since the folder was read
		}
		if err != nil {
			return err
		}
		info := m.info(it.key)
		info.Metadata = nil
		l.page.Objects = append(l.page.Objects, info)
	}
	return nil
}

// readFolder reads folder dir, whose keys start with keyPrefix, and returns
// the objects and folders in it that may hold keys under prefix after
// startAfter, sorted by key. A missing folder (or a file where a folder
// would be) holds nothing. The store's own folder, names escapeSeg cannot
// make (data files, records being written, someone else's files) and keys
// ValidateKey refuses are left out.
func (d *Store) readFolder(dir, keyPrefix, prefix, startAfter string) ([]dirItem, error) {
	// One instant's view of the folder (see readFolderOnce), unsorted: the
	// names are sorted below by the keys they hold, which escaping orders
	// differently.
	ents, err := readFolderOnce(dir)
	if d.listHook != nil && err == nil {
		d.listHook(dir)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return nil, nil // missing, a file, or removed meanwhile: holds nothing
		}
		return nil, err
	}
	var items []dirItem
	for _, e := range ents {
		name := e.name
		if e.dir {
			seg, ok := unescapeSeg(name)
			if !ok || filepath.Join(dir, name) == d.sys {
				continue
			}
			k := keyPrefix + seg + "/"
			if !strings.HasPrefix(k, prefix) && !strings.HasPrefix(prefix, k) {
				continue // no key of it is under prefix
			}
			if k <= startAfter && !strings.HasPrefix(startAfter, k) {
				continue // every key of it sorts before startAfter
			}
			items = append(items, dirItem{key: k, name: name, folder: true})
			continue
		}
		base, ok := strings.CutSuffix(name, metaSuffix)
		if !ok {
			continue
		}
		seg, ok := unescapeSeg(base)
		if !ok {
			continue
		}
		k := keyPrefix + seg
		if k > startAfter && strings.HasPrefix(k, prefix) && staging.ValidateKey(k) == nil {
			items = append(items, dirItem{key: k, name: name})
		}
	}
	slices.SortFunc(items, func(a, b dirItem) int { return strings.Compare(a.key, b.key) })
	return items, nil
}
