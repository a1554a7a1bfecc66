package staging

import "fmt"

// Op names a Store operation, for the wrappers that count, delay or fail
// requests by operation.
type Op uint8

// Operations. OpAny (the zero Op) matches every operation in a fault Rule.
const (
	OpAny Op = iota
	OpPut
	OpGet
	OpHead
	OpList
	OpDelete
	OpCreateMultipart
	OpUploadPart
	OpCompleteMultipart
	OpAbortMultipart
	OpListUploads
	// NumOps is one past the last operation: the length of an array
	// indexed by Op.
	NumOps
)

var opNames = [NumOps]string{"any", "put", "get", "head", "list", "delete", "create-multipart", "upload-part", "complete-multipart", "abort-multipart", "list-uploads"}

func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}
