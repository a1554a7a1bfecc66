package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/segment"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/staging/mem"
)

// A create whose head's answer was lost and resent finds its own head: the
// file exists and is ours. Without the WAL the head is created by the first
// publish, so the resend meets that PUT.
func TestCreateHeadAnswerLost(t *testing.T) {
	for _, wal := range []bool{false, true} {
		mem := mem.New()
		p := smallParams(segment.FormatStream)
		p.WAL = wal
		f, err := Create(context.Background(), newResendStore(mem, true), "a/", Options{Params: p, FileID: "a/"})
		if err != nil {
			t.Fatalf("wal=%v: create with a resent head: %v", wal, err)
		}
		data := pattern(3000, 1)
		if _, err := f.WriteAt(context.Background(), data, 0); err != nil {
			t.Fatalf("wal=%v: write: %v", wal, err)
		}
		if err := f.Sync(context.Background()); err != nil {
			t.Fatalf("wal=%v: sync: %v", wal, err)
		}
		_ = f.Close()
		g := mustOpen(t, mem, "a/", p)
		if got := readAll(t, g); string(got) != string(data) {
			t.Fatalf("wal=%v: read back %d bytes, want the %d written", wal, len(got), len(data))
		}
		_ = g.Close()
	}
}

// Create sends nothing without the WAL; with it, it creates the head and
// someone else's head is ErrExists.
func TestCreateRequests(t *testing.T) {
	for _, wal := range []bool{false, true} {
		ctx := context.Background()
		cs := counting.New(mem.New())
		p := smallParams(segment.FormatStream)
		p.WAL = wal
		f, err := Create(ctx, cs, "a/", Options{Params: p, FileID: "a/"})
		if err != nil {
			t.Fatalf("wal=%v: create: %v", wal, err)
		}
		n := cs.Snapshot().Total().Requests
		switch {
		case !wal && n != 0:
			t.Fatalf("create without the WAL made %d requests, want none: %v", n, cs.Snapshot())
		case wal && n == 0:
			t.Fatalf("create with the WAL made no request")
		}
		// Closed unwritten: nothing is published (a missing head is an
		// empty file to the mount); with the WAL the head is there.
		if _, err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		_, err = cs.Head(ctx, volume.HeadKey("a/"))
		if wal != (err == nil) || (!wal && !errors.Is(err, staging.ErrNotFound)) {
			t.Fatalf("wal=%v: head after an unwritten close: %v", wal, err)
		}
		if !wal {
			if _, err := Open(ctx, cs, "a/", Options{Params: p, FileID: "a/"}); !errors.Is(err, ErrNotExist) {
				t.Fatalf("open of a file never published: %v, want ErrNotExist", err)
			}
			continue
		}
		if _, err := Create(ctx, cs, "a/", Options{Params: p, FileID: "a/"}); !errors.Is(err, ErrExists) {
			t.Fatalf("wal: create over another head: %v, want ErrExists", err)
		}
	}
}

// Without the WAL a second Create of the same prefix cannot see the first;
// its first publish meets the other head and is a conflict like any other.
func TestCreateOverAnotherHeadConflicts(t *testing.T) {
	for _, policy := range []ConflictPolicy{ConflictFailFast, ConflictRetry} {
		ctx := context.Background()
		mem := mem.New()
		p := smallParams(segment.FormatStream)
		p.ConflictPolicy = policy
		a := mustCreate(t, mem, "a/", p)
		theirs := pattern(2000, 3)
		if _, err := a.WriteAt(ctx, theirs, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := Create(ctx, mem, "a/", Options{Params: p, FileID: "a/"})
		if err != nil {
			t.Fatalf("second create: %v", err)
		}
		ours := pattern(700, 4)
		if _, err := b.WriteAt(ctx, ours, 0); err != nil {
			t.Fatal(err)
		}
		_, err = b.Flush(ctx)
		want := append([]byte(nil), theirs...)
		if policy == ConflictFailFast {
			var ce *ConflictError
			if !errors.As(err, &ce) || ce.Theirs.Cno != 1 {
				t.Fatalf("failfast: first flush of the second create: %v, want a conflict with checkpoint 1", err)
			}
		} else {
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			// Their checkpoint, then our write: our bytes, then theirs
			// (not the zeros of the empty file this writer started from).
			copy(want, ours)
		}
		if got := readAll(t, b); !bytes.Equal(got, want) {
			t.Fatalf("policy %d: read back differs at %d", policy, commonPrefix(got, want))
		}
		_ = a.Close()
		_ = b.Close()
	}
}
