// Package segment owns the bytes of every object ckptfs writes for a file:
// object names, the StreamSegment and PartedSegment layouts, the segment
// header, the summary, the inode encoding, the head object, their checksums
// and the rules by which a reader refuses an object. It also builds objects:
// StreamBuilder fills a stream object piece by piece, Header.Seal and
// EncodeParted lay out a parted one. The index nodes inside objects ("meta
// blocks") are opaque here: package blockmap encodes them, each exactly
// MetaBlockSize bytes.
//
// All integers are little-endian. The diagrams below, and the constants in the
// code that implement them, are part of the format.
//
// # Object names
//
// Under a file's prefix, the objects of checkpoint cno are "<cno>.<part>": cno
// in decimal zero-padded to 10 digits (wider only when it does not fit), part
// in decimal unpadded: "0000000042.3". Part 0 is the checkpoint itself and
// carries its inode; parts 1.. hold data sent ahead or the rest of a large
// checkpoint. An unsuffixed "<cno>" is part 0 and is never tail first.
//
// # Layouts
//
// A StreamSegment is written tail first, so its data can be sent before the
// object is finished; a data block's offset is slot × DataBlockSize the
// moment it is placed:
//
//	+------------------------+------------------------+---------------+------------+
//	| data blocks            | meta blocks            | summary       | header     |
//	| n × DataBlockSize      | m × MetaBlockSize      | n × 16        | 256        |
//	+------------------------+------------------------+---------------+------------+
//
// A PartedSegment is written all at once, header first (by a flush, or sent
// ahead whole once its blocks are known):
//
//	+------------+------------------------+------------------------+---------------+
//	| header     | data blocks            | meta blocks            | summary       |
//	| 256        | n × DataBlockSize      | m × MetaBlockSize      | n × 16        |
//	+------------+------------------------+------------------------+---------------+
//
// Either way the object is exactly n×DataBlockSize + m×MetaBlockSize + n×16 +
// 256 bytes, and never more than MaxObjectBytes (1 GiB, what a pointer
// addresses in one object). With no data and no meta blocks both layouts are
// the same 256 bytes.
//
// # Header (256 bytes)
//
//	off size field
//	  0   8  magic "CKPTSEG1"
//	  8   2  layout version: 1, or 2 when an inode names a lineage
//	 10   1  format (1 parted, 2 stream): the object's layout
//	 11   1  flags; bit 0: carries the checkpoint inode (set exactly in part 0)
//	 12   4  part
//	 16   8  cno (>= 1)
//	 24   4  data block size (power of two, 512 B .. 16 MiB)
//	 28   4  meta block size (power of two, 256 B .. 1 MiB)
//	 32   4  n data blocks
//	 36   4  m meta blocks
//	 40   8  file tag: xxh3-64 of the file's id
//	 48  80  base inode: the inode the checkpoint was built on
//	         (zero in parts other than 0 and for a new file)
//	128  80  inode (zero unless flag bit 0)
//	208  44  reserved, zero
//	252   4  CRC-32C (Castagnoli) of bytes 0..251
//
// # Inode (80 bytes)
//
//	off size field
//	  0   8  cno
//	  8   8  size in bytes
//	 16   1  format (1 parted, 2 stream)
//	 17   1  height of the block map (0 = empty, at most 32)
//	 18   2  reserved, zero
//	 20   4  data block size
//	 24   4  meta block size
//	 28   4  parts: highest part number the checkpoint uses, plus one
//	 32  16  root Ptr: cno u64, part u32, slot u32 (zero exactly when height 0)
//	 48   8  mtime, Unix nanoseconds (int64)
//	 56   8  lineage: the cno whose lineage object names the files some
//	         objects belong to (a copy by reference; lineage.go); 0: none
//	 64  16  reserved, zero
//
// # Summary entry (16 bytes, one per data slot, in slot order)
//
//	off size field
//	  0   8  fbn: file block number
//	  8   4  CRC-32C of the block's bytes
//	 12   4  flags; bit 0: dead slot (the block was written again after it
//	         was placed; its bytes here are not the file's)
//
// # Head object (a file's "inode" key, replaced with If-Match)
//
// 128 bytes, then in version 2 an optional embedded copy of the checkpoint's
// part 0 (e bytes, at most MaxEmbedBytes = 128 KiB), so that a small file is
// read with one request and saved with one round trip (its part 0 and head
// stored at once):
//
//	off size field
//	  0   8  magic "CKPTHEAD"
//	  8   2  head version: 1, 2, 3 (as 2, and the inode names a lineage),
//	         or 4 (as 2 or 3, with a nonce)
//	 10   1  format (equals the inode's)
//	 11   1  v4: flags, bit 0: block count unknown; otherwise reserved, zero
//	 12   4  v2: e, length of the embedded part 0 (0: none); v1: zero
//	 16   8  file tag
//	 24  80  inode of the latest checkpoint
//	104   8  v2: data blocks the checkpoint stores; v1: zero (unknown)
//	112   4  v2: CRC-32C of the embedded bytes (0 without); v1: zero
//	116   8  v4: a nonce, not zero; otherwise reserved, zero
//	124   4  CRC-32C of bytes 0..123
//	128   e  v2: the embedded part 0, exactly the bytes of object <cno>.0
//
// The nonce is written only where a head is rewritten with only its
// metadata changed (the write-ahead log's mark): on S3 an object's ETag is
// the MD5 of its bytes, so without it the rewrite would keep the ETag, and
// a writer whose If-Match names the head it read would replace the rewrite
// and its metadata unseen.
//
// An embedded part 0 is verified as a part 0 read from the store is (its
// header names <cno>.0 of this file in the inode's format, the counts add up
// to e, the summary decodes), its inode must be the head's, and only a
// checkpoint of one object (parts 1) embeds it; otherwise the head is
// corrupt. Readers bound a head object by HeadSize + MaxEmbedBytes.
//
// # Refusals
//
// A reader refuses an object unless, in this order: the magic holds
// (ErrBadMagic); the layout version is one this build reads (a newer one is an
// *UnsupportedError wrapping ErrUnsupported: a newer build wrote it, the
// object is not corrupt); the CRC holds (ErrChecksum); every field holds a
// possible value (ErrInvalid: format, flags, block sizes, inodes, reserved
// bytes); the layout is the one the reader expected when it knew it
// (ErrFormat); the header names the object it was read from, cno, part and
// file tag (ErrWrongObject: an object copied under another name or file); the
// counts add up to exactly the object's length (ErrSize). Every refusal but
// ErrUnsupported is a *CorruptError naming the key, for which
// errors.Is(err, ErrCorrupt) holds. Errors of the store itself (ErrNotFound,
// a cancelled context) are passed on wrapped with what was being read.
//
// # Reading
//
// A reader that knows the format reads the header with one request: a
// suffix request for the last 256 bytes of a stream object, a ranged request
// for the first 256 of a parted one; either answer gives the object's length
// for the count check. It then reads exactly what it wants: the meta region
// for a lookup in the block map (ReadMeta), or the summary when opening a
// checkpoint (ReadSummary). The two are about the same size, so neither is
// read for the other. Data is read by the caller, by ranges from
// Layout.DataOffset.
//
// A reader that does not know the format (opening a given checkpoint, the
// cleaner) uses DetectHeader: it looks at the end first and, when the end is
// not a stream header (bad magic), reads the start and parses a parted header
// there. An unsuffixed object goes straight to the start.
package segment
