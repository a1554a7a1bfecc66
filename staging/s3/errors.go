package s3

import (
	"errors"
	"fmt"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/ckptfs/ckptfs/staging"
)

// S3 error codes and what they mean to callers. Status codes cover answers
// without a body (HEAD).
func sentinelOf(err error) error {
	code := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchBucket":
		// Not ErrNotFound: a missing bucket must not look like a missing
		// object, which callers may answer by creating one.
		return nil
	case code == "XAdminUserNotFound":
		// versitygw's answer (404) to an unknown access key: not a
		// missing object either.
		return nil
	case code == "NoSuchKey" || code == "NotFound" || code == "NoSuchUpload" || status == http.StatusNotFound:
		return staging.ErrNotFound
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return staging.ErrPrecondition
	case code == "ConditionalRequestConflict":
		// A concurrent conditional write to the same key won (409).
		return staging.ErrPrecondition
	case code == "EntityTooSmall":
		return staging.ErrPartTooSmall
	case code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable:
		return staging.ErrInvalidRange
	case code == "KeyTooLongError":
		return staging.ErrInvalidKey
	}
	return nil
}

// fail wraps err, an error of the SDK, with the operation and key and the
// sentinel it means; both stay reachable with errors.Is and errors.As.
// ifMatch: the request was an If-Match write, where S3 answers 404 NoSuchKey
// for a missing key, which the Store contract calls a failed precondition.
func fail(op, key string, err error, ifMatch bool) error {
	sentinel := sentinelOf(err)
	if sentinel == nil && isTimeout(err) {
		sentinel = staging.ErrTimeout
	}
	if ifMatch && sentinel == staging.ErrNotFound {
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "NoSuchUpload" {
			sentinel = staging.ErrPrecondition
		}
	}
	if sentinel == nil {
		return fmt.Errorf("s3 %s %s: %w", op, staging.TruncKey(key), err)
	}
	return fmt.Errorf("s3 %s %s: %w: %w", op, staging.TruncKey(key), sentinel, err)
}

// bodyFail wraps an error reading a response body: the request was answered,
// the body was cut or stalled.
func bodyFail(op, key string, err error) error {
	if isTimeout(err) {
		return fmt.Errorf("s3 %s %s: read body: %w: %w", op, staging.TruncKey(key), staging.ErrTimeout, err)
	}
	return fmt.Errorf("s3 %s %s: read body: %w", op, staging.TruncKey(key), err)
}
