package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3test"
)

// TestS3ReusesConnections: small requests of every kind, at most inFlight at
// once, dial no more connections than inFlight, with slack: each answer's
// connection goes back to the pool, bodies read to their end, errors
// included. A client that closed them would dial one per request.
//
// The slack is for connections dialled that no one closed. net/http hands
// a connection back to its pool after the answer's body ended, from its own
// goroutine: a request that starts before its worker's last connection is
// back dials one, and keeps whichever comes first (the other stays in the
// pool). A loaded machine widens that window (11 dials of 200 requests,
// once, under the race detector beside the end-to-end tests); a server
// that closes a connection costs one more too.
func TestS3ReusesConnections(t *testing.T) {
	const (
		requests = 200
		inFlight = 8
		slack    = inFlight
	)
	ctx := context.Background()
	s := newS3(t, s3test.Config(t))
	data := bytes.Repeat([]byte{0x5a}, 4<<10)
	// Warm up with one request, so that the count starts from a pool that
	// has seen the server (credentials, region: nothing more to fetch).
	if _, err := s.Put(ctx, "warm", data, staging.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before := s.Dials()

	jobs := make(chan int)
	errs := make(chan error, inFlight)
	var wg sync.WaitGroup
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := connOp(ctx, s, i, data); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range requests {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	dials := s.Dials() - before
	t.Logf("%d requests, at most %d in flight: %d connections dialled", requests, inFlight, dials)
	if dials > inFlight+slack {
		t.Errorf("%d requests, at most %d in flight, dialled %d connections, want at most %d", requests, inFlight, dials, inFlight+slack)
	}
}

// connOp is request i of TestS3ReusesConnections: a mix of PUT, whole and
// ranged GET, GET and HEAD of a missing key, LIST and DELETE.
func connOp(ctx context.Context, s staging.Store, i int, data []byte) error {
	key := fmt.Sprintf("c%03d", i/8)
	var err error
	switch i % 8 {
	case 0:
		_, err = s.Put(ctx, key, data, staging.PutOptions{})
	case 1, 2:
		_, _, err = s.Get(ctx, "warm", staging.Whole())
	case 3:
		_, _, err = s.Get(ctx, "warm", staging.Range{Off: 100, Len: 1000})
	case 4:
		if _, err = s.Head(ctx, "missing"); errors.Is(err, staging.ErrNotFound) {
			err = nil
		}
	case 5:
		if _, _, err = s.Get(ctx, "missing", staging.Whole()); errors.Is(err, staging.ErrNotFound) {
			err = nil
		}
	case 6:
		_, err = s.List(ctx, "c", "", 100)
	case 7:
		_, err = s.Head(ctx, "warm")
	}
	if err != nil {
		return fmt.Errorf("request %d: %w", i, err)
	}
	return nil
}

// TestS3ReusesConnectionsOddAnswers: answers versitygw does not give, that
// the store reads only part of (a whole object for a range) or whose end
// the SDK's decoder does not read (a chunked listing or error), still leave
// their connection reusable: one connection for requests one at a time.
func TestS3ReusesConnectionsOddAnswers(t *testing.T) {
	const requests = 20
	whole := bytes.Repeat([]byte{'w'}, 32<<10)
	listing := `<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult><Name>b</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>10</MaxKeys><IsTruncated>false</IsTruncated>` +
		`<Contents><Key>k</Key><Size>3</Size><ETag>"e"</ETag><LastModified>2006-01-02T15:04:05.000Z</LastModified></Contents></ListBucketResult>`
	notFound := `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message><Key>k</Key></Error>`
	// chunked writes body in two flushed pieces, so that it goes out
	// chunked, its end a chunk of its own.
	chunked := func(status int, body string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "\n")
		}
	}
	for _, tc := range []struct {
		name  string
		serve func(http.ResponseWriter, *http.Request)
		op    func(ctx context.Context, s staging.Store) error
	}{
		{"200 whole for a range", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(whole)))
			_, _ = w.Write(whole)
		}, func(ctx context.Context, s staging.Store) error {
			_, _, err := s.Get(ctx, "k", staging.Bytes(2, 3))
			return err
		}},
		{"chunked listing", chunked(200, listing), func(ctx context.Context, s staging.Store) error {
			_, err := s.List(ctx, "", "", 10)
			return err
		}},
		{"chunked 404", chunked(404, notFound), func(ctx context.Context, s staging.Store) error {
			if _, _, err := s.Get(ctx, "k", staging.Whole()); !errors.Is(err, staging.ErrNotFound) {
				return fmt.Errorf("get: %v, want ErrNotFound", err)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake, s := newFakeS3(t)
			fake.mu.Lock()
			fake.serve = tc.serve
			fake.mu.Unlock()
			for i := range requests {
				if err := tc.op(t.Context(), s); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			if d := s.Dials(); d != 1 {
				t.Errorf("%d requests one at a time dialled %d connections, want 1", requests, d)
			}
		})
	}
}
