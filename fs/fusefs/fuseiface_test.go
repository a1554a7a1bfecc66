package fusefs

import (
	"reflect"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
)

// goFuseOps are go-fuse's one-method operation interfaces, of nodes and of
// file handles (go doc github.com/hanwen/go-fuse/v2/fs).
var goFuseOps = struct{ node, file []reflect.Type }{
	node: []reflect.Type{
		reflect.TypeFor[fs.NodeAccesser](),
		reflect.TypeFor[fs.NodeAllocater](),
		reflect.TypeFor[fs.NodeCopyFileRanger](),
		reflect.TypeFor[fs.NodeCreater](),
		reflect.TypeFor[fs.NodeFlusher](),
		reflect.TypeFor[fs.NodeFsyncer](),
		reflect.TypeFor[fs.NodeGetattrer](),
		reflect.TypeFor[fs.NodeGetlker](),
		reflect.TypeFor[fs.NodeGetxattrer](),
		reflect.TypeFor[fs.NodeIoctler](),
		reflect.TypeFor[fs.NodeLinker](),
		reflect.TypeFor[fs.NodeListxattrer](),
		reflect.TypeFor[fs.NodeLookupNoder](),
		reflect.TypeFor[fs.NodeLookupParenter](),
		reflect.TypeFor[fs.NodeLookuper](),
		reflect.TypeFor[fs.NodeLseeker](),
		reflect.TypeFor[fs.NodeMkdirer](),
		reflect.TypeFor[fs.NodeMknoder](),
		reflect.TypeFor[fs.NodeOnAdder](),
		reflect.TypeFor[fs.NodeOnForgetter](),
		reflect.TypeFor[fs.NodeOpendirHandler](),
		reflect.TypeFor[fs.NodeOpendirer](),
		reflect.TypeFor[fs.NodeOpener](),
		reflect.TypeFor[fs.NodeReaddirer](),
		reflect.TypeFor[fs.NodeReader](),
		reflect.TypeFor[fs.NodeReadlinker](),
		reflect.TypeFor[fs.NodeReleaser](),
		reflect.TypeFor[fs.NodeRemovexattrer](),
		reflect.TypeFor[fs.NodeRenamer](),
		reflect.TypeFor[fs.NodeRmdirer](),
		reflect.TypeFor[fs.NodeSetattrer](),
		reflect.TypeFor[fs.NodeSetlker](),
		reflect.TypeFor[fs.NodeSetlkwer](),
		reflect.TypeFor[fs.NodeSetxattrer](),
		reflect.TypeFor[fs.NodeStatfser](),
		reflect.TypeFor[fs.NodeStatxer](),
		reflect.TypeFor[fs.NodeSymlinker](),
		reflect.TypeFor[fs.NodeTmpfiler](),
		reflect.TypeFor[fs.NodeUnlinker](),
		reflect.TypeFor[fs.NodeWrapChilder](),
		reflect.TypeFor[fs.NodeWriter](),
		reflect.TypeFor[fs.NodeWritever](),
	},
	file: []reflect.Type{
		reflect.TypeFor[fs.FileAllocater](),
		reflect.TypeFor[fs.FileFlusher](),
		reflect.TypeFor[fs.FileFsyncdirer](),
		reflect.TypeFor[fs.FileFsyncer](),
		reflect.TypeFor[fs.FileGetattrer](),
		reflect.TypeFor[fs.FileGetlker](),
		reflect.TypeFor[fs.FileIoctler](),
		reflect.TypeFor[fs.FileLookuper](),
		reflect.TypeFor[fs.FileLseeker](),
		reflect.TypeFor[fs.FilePassthroughFder](),
		reflect.TypeFor[fs.FileReaddirenter](),
		reflect.TypeFor[fs.FileReader](),
		reflect.TypeFor[fs.FileReleasedirer](),
		reflect.TypeFor[fs.FileReleaser](),
		reflect.TypeFor[fs.FileSeekdirer](),
		reflect.TypeFor[fs.FileSetattrer](),
		reflect.TypeFor[fs.FileSetlker](),
		reflect.TypeFor[fs.FileSetlkwer](),
		reflect.TypeFor[fs.FileStatxer](),
		reflect.TypeFor[fs.FileWriter](),
		reflect.TypeFor[fs.FileWritever](),
	},
}

// TestFuseInterfaces: every method of a node or handle type named as a
// go-fuse operation implements that operation's interface. A method whose
// signature drifted would compile, and go-fuse would answer the operation
// with ENOSYS; the compile-time checks next to each type catch only the
// methods someone remembered to list.
func TestFuseInterfaces(t *testing.T) {
	for _, c := range []struct {
		typ reflect.Type
		ops []reflect.Type
	}{
		{reflect.TypeFor[*node](), goFuseOps.node},
		{reflect.TypeFor[*ckptDir](), goFuseOps.node},
		{reflect.TypeFor[*ckptList](), goFuseOps.node},
		{reflect.TypeFor[*ckptFile](), goFuseOps.node},
		{reflect.TypeFor[*handle](), goFuseOps.file},
		{reflect.TypeFor[*dirHandle](), goFuseOps.file},
		{reflect.TypeFor[*ckptHandle](), goFuseOps.file},
	} {
		answered := 0
		for _, op := range c.ops {
			if op.NumMethod() != 1 {
				t.Fatalf("%v has %d methods, want one", op, op.NumMethod())
			}
			name := op.Method(0).Name
			if _, ok := c.typ.MethodByName(name); !ok || promoted(c.typ, name) {
				continue
			}
			if !c.typ.Implements(op) {
				t.Errorf("%v.%s does not implement %v: go-fuse answers it with ENOSYS", c.typ, name, op)
			}
			answered++
		}
		if answered == 0 {
			t.Errorf("%v answers no go-fuse operation", c.typ)
		}
	}
}

// promoted says whether method name of typ comes from an embedded field
// (fs.Inode's own methods are not operations of ours).
func promoted(typ reflect.Type, name string) bool {
	for i := 0; i < typ.Elem().NumField(); i++ {
		f := typ.Elem().Field(i)
		if f.Anonymous {
			if _, ok := reflect.PointerTo(f.Type).MethodByName(name); ok {
				return true
			}
		}
	}
	return false
}
