package s3

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckptfs/ckptfs/staging"
)

// s3Upload is what S3 knows of an upload it started.
type s3Upload struct {
	md    map[string]string
	sizes map[int32]int64  // by part number
	sums  map[int32]string // checksum of each part (base64), when partSum is set
}

// maxKnownUploads bounds how many uploads an S3 remembers; one it forgot
// (or never knew) costs CompleteMultipart a ListParts and a Head. Each
// entry holds at most MaxParts sizes and checksums.
const maxKnownUploads = 4096

func (s *Store) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	if err := staging.CheckWrite(ctx, "s3 create multipart upload", key, opts.Metadata); err != nil {
		return "", err
	}
	k, err := s.full(key)
	if err != nil {
		return "", fmt.Errorf("s3 create multipart upload: %w", err)
	}
	out, err := s.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:   &s.bucket,
		Key:      k,
		Metadata: opts.Metadata,

		ChecksumAlgorithm:    s.partSum,
		ServerSideEncryption: s.sse,
		SSEKMSKeyId:          s.kmsKey,
		StorageClass:         s.class,
		RequestPayer:         s.payer,
	})
	if err != nil {
		return "", fail("create multipart upload", key, err, false)
	}
	id := aws.ToString(out.UploadId)
	if id == "" {
		return "", fmt.Errorf("s3 create multipart upload %s: the server returned no upload id", key)
	}
	s.mu.Lock()
	if len(s.uploads) < s.maxUploads {
		u := &s3Upload{md: meta(maps.Clone(opts.Metadata)), sizes: make(map[int32]int64)}
		if s.partSum != "" {
			u.sums = make(map[int32]string)
		}
		s.uploads[id] = u
	}
	s.mu.Unlock()
	return id, nil
}

func (s *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	if err := staging.CheckWrite(ctx, "s3 upload part", key, nil); err != nil {
		return "", err
	}
	if err := staging.CheckPartNumber(n); err != nil {
		return "", fmt.Errorf("s3 upload part of %s: %w", key, err)
	}
	k, err := s.full(key)
	if err != nil {
		return "", fmt.Errorf("s3 upload part: %w", err)
	}
	in := &s3.UploadPartInput{
		Bucket:        &s.bucket,
		Key:           k,
		UploadId:      &uploadID,
		PartNumber:    aws.Int32(n),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		RequestPayer:  s.payer,
	}
	sum := ""
	if s.partSum != "" {
		// Computed here rather than by the SDK, because
		// CompleteMultipart must name it again.
		sum = partChecksum(s.partSum, data)
		in.ChecksumAlgorithm = s.partSum
		if s.partSum == types.ChecksumAlgorithmCrc32 {
			in.ChecksumCRC32 = aws.String(sum)
		} else {
			in.ChecksumCRC32C = aws.String(sum)
		}
	}
	out, err := s.c.UploadPart(ctx, in, s.putOpts...)
	if err != nil {
		return "", fail(fmt.Sprintf("upload part %d of", n), key, err, false)
	}
	s.mu.Lock()
	if u := s.uploads[uploadID]; u != nil {
		u.sizes[n] = int64(len(data))
		if u.sums != nil {
			u.sums[n] = sum
		}
	}
	s.mu.Unlock()
	return aws.ToString(out.ETag), nil
}

// known returns the size and metadata of the object that parts of an upload
// started through s make.
func (s *Store) known(uploadID string, parts []staging.CompletedPart) (size int64, md map[string]string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.uploads[uploadID]
	if u == nil {
		return 0, nil, false
	}
	for _, p := range parts {
		n, ok := u.sizes[p.Number]
		if !ok {
			return 0, nil, false
		}
		size += n
	}
	return size, maps.Clone(u.md), true
}

// partSums are the checksums of parts by number, as CompleteMultipart must
// name them: those this S3 sent, or, for an upload it does not know, those
// the server lists. Nil when uploads carry no checksum.
func (s *Store) partSums(ctx context.Context, k *string, uploadID string, parts []staging.CompletedPart) (map[int32]string, error) {
	if s.partSum == "" {
		return nil, nil
	}
	s.mu.Lock()
	if u := s.uploads[uploadID]; u != nil && u.sums != nil {
		sums, all := make(map[int32]string, len(parts)), true
		for _, p := range parts {
			sum, ok := u.sums[p.Number]
			all = all && ok
			sums[p.Number] = sum
		}
		if all {
			s.mu.Unlock()
			return sums, nil
		}
	}
	s.mu.Unlock()
	// Started elsewhere, forgotten, or a part sent by another process.
	sums := make(map[int32]string, len(parts))
	in := &s3.ListPartsInput{Bucket: &s.bucket, Key: k, UploadId: &uploadID, RequestPayer: s.payer}
	for pg := s3.NewListPartsPaginator(s.c, in); pg.HasMorePages(); {
		out, err := pg.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, p := range out.Parts {
			sum := aws.ToString(p.ChecksumCRC32C)
			if s.partSum == types.ChecksumAlgorithmCrc32 {
				sum = aws.ToString(p.ChecksumCRC32)
			}
			// Read from the server: a CRC32 in base64 is 8 bytes.
			if sum != "" && len(sum) <= 16 && len(sums) < staging.MaxParts {
				sums[aws.ToInt32(p.PartNumber)] = sum
			}
		}
	}
	return sums, nil
}

func (s *Store) forget(uploadID string) {
	s.mu.Lock()
	delete(s.uploads, uploadID)
	s.mu.Unlock()
}

// CompleteMultipart publishes the upload. For an upload started through s,
// the size and metadata it returns are known without asking the server; for
// one started elsewhere it asks (Head of the new ETag), and if the object has
// been replaced already by then, Size is -1 and Metadata nil.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	if err := staging.CheckWrite(ctx, "s3 complete multipart upload", key, nil); err != nil {
		return staging.ObjectInfo{}, err
	}
	if err := staging.CheckCompletedParts(parts); err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("s3 complete multipart upload %s of %s: %w", uploadID, key, err)
	}
	k, err := s.full(key)
	if err != nil {
		return staging.ObjectInfo{}, fmt.Errorf("s3 complete multipart upload: %w", err)
	}
	// Without the parts' checksums (ListParts failed) the completion is
	// still tried: its answer says best what is wrong with the upload.
	sums, _ := s.partSums(ctx, k, uploadID, parts)
	cps := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		cps[i] = types.CompletedPart{PartNumber: aws.Int32(p.Number), ETag: aws.String(p.ETag)}
		switch sum := sums[p.Number]; {
		case sum == "":
		case s.partSum == types.ChecksumAlgorithmCrc32:
			cps[i].ChecksumCRC32 = aws.String(sum)
		default:
			cps[i].ChecksumCRC32C = aws.String(sum)
		}
	}
	in := &s3.CompleteMultipartUploadInput{
		Bucket:          &s.bucket,
		Key:             k,
		UploadId:        &uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: cps},
		RequestPayer:    s.payer,
	}
	setConditions(&in.IfNoneMatch, &in.IfMatch, cond)
	out, err := s.c.CompleteMultipartUpload(ctx, in)
	if err != nil {
		// Whether the upload is still there is unknown (a lost answer
		// may hide a completion): a retry reads the parts back.
		s.forget(uploadID)
		return staging.ObjectInfo{}, fail("complete multipart upload "+uploadID+" of", key, err, cond.IfMatch != "")
	}
	info := staging.ObjectInfo{
		Key:          key,
		ETag:         aws.ToString(out.ETag),
		LastModified: answeredAt(awsmiddleware.GetServerTime(out.ResultMetadata)),
	}
	size, md, ok := s.known(uploadID, parts)
	s.forget(uploadID)
	if ok {
		info.Size, info.Metadata = size, md
		return info, nil
	}
	h, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: k, IfMatch: out.ETag, RequestPayer: s.payer})
	if err != nil {
		info.Size = -1
		return info, nil
	}
	info.Size = aws.ToInt64(h.ContentLength)
	info.LastModified = aws.ToTime(h.LastModified)
	info.Metadata = meta(h.Metadata)
	return info, nil
}

func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := staging.CheckWrite(ctx, "s3 abort multipart upload", key, nil); err != nil {
		return err
	}
	k, err := s.full(key)
	if err != nil {
		return fmt.Errorf("s3 abort multipart upload: %w", err)
	}
	_, err = s.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: k, UploadId: &uploadID, RequestPayer: s.payer})
	// Forgotten even if the abort failed: the caller gives the upload up.
	s.forget(uploadID)
	if err != nil {
		return fail("abort multipart upload "+uploadID+" of", key, err, false)
	}
	return nil
}

func (s *Store) ListMultipartUploads(ctx context.Context, prefix string) ([]staging.Upload, error) {
	if err := staging.CheckPrefix(ctx, "s3 list multipart uploads", prefix); err != nil {
		return nil, err
	}
	full := s.prefix + prefix
	in := &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: aws.String(full), EncodingType: types.EncodingTypeUrl, RequestPayer: s.payer}
	if s.directory {
		in.Prefix = aws.String(folder(full))
	}
	var ups []staging.Upload
	for {
		out, err := s.c.ListMultipartUploads(ctx, in)
		if err != nil {
			return nil, fail("list multipart uploads", prefix, err, false)
		}
		for _, u := range out.Uploads {
			k, err := decodeKey(aws.ToString(u.Key), out.EncodingType)
			if err != nil {
				return nil, fmt.Errorf("s3 list multipart uploads %s: %w", prefix, err)
			}
			if !strings.HasPrefix(k, full) {
				continue // directory buckets: outside the prefix, inside its folder
			}
			key, err := s.strip(k)
			if err != nil {
				return nil, fmt.Errorf("s3 list multipart uploads %s: %w", prefix, err)
			}
			ups = append(ups, staging.Upload{Key: key, UploadID: aws.ToString(u.UploadId), Initiated: aws.ToTime(u.Initiated)})
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		// Directory buckets page by key marker only (no upload-id-marker).
		marker, err := decodeKey(aws.ToString(out.NextKeyMarker), out.EncodingType)
		if err != nil {
			return nil, fmt.Errorf("s3 list multipart uploads %s: %w", prefix, err)
		}
		next := &s3.ListMultipartUploadsInput{Bucket: in.Bucket, Prefix: in.Prefix, KeyMarker: &marker, EncodingType: in.EncodingType, RequestPayer: s.payer}
		if !s.directory {
			next.UploadIdMarker = out.NextUploadIdMarker
		}
		if aws.ToString(next.KeyMarker) == "" ||
			aws.ToString(next.KeyMarker) == aws.ToString(in.KeyMarker) && aws.ToString(next.UploadIdMarker) == aws.ToString(in.UploadIdMarker) {
			return nil, fmt.Errorf("s3 list multipart uploads %s: truncated answer without a new marker", prefix)
		}
		in = next
	}
	staging.SortUploads(ups)
	return ups, nil
}

// partChecksum is the checksum alg (CRC32C or CRC32) of data as S3 writes
// it: base64 of the big-endian value.
func partChecksum(alg types.ChecksumAlgorithm, data []byte) string {
	tab := crc32cTable
	if alg == types.ChecksumAlgorithmCrc32 {
		tab = crc32.IEEETable
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc32.Checksum(data, tab))
	return base64.StdEncoding.EncodeToString(b[:])
}

// crc32cOf is the CRC32C of data as S3 writes it.
func crc32cOf(data []byte) string { return partChecksum(types.ChecksumAlgorithmCrc32c, data) }

var crc32cTable = crc32.MakeTable(crc32.Castagnoli)
