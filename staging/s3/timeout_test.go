package s3_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/s3"
)

// blackHole is a TCP server on loopback that accepts connections and never
// reads or answers: a store that stopped responding.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// stallingServer answers every request with headers promising 1000 bytes,
// sends 10, then sends nothing more until the test ends.
func stallingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nETag: \"e\"\r\n" +
					"Last-Modified: Mon, 02 Jan 2006 15:04:05 GMT\r\n\r\n0123456789"))
				<-stop
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		close(stop)
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// outageStore is a store on endpoint with short bounds, so that the tests
// end soon; the assertions are on the errors, not on the time taken.
func outageStore(t *testing.T, endpoint string) *s3.Store {
	return newS3(t, s3.Config{
		Bucket: "b", Endpoint: endpoint, PathStyle: true, AccessKey: "a", SecretKey: "s",
		Timeouts: s3.Timeouts{
			Connect: time.Second, Request: 200 * time.Millisecond,
			Stall: 200 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		},
	})
}

// The test's own deadline is far beyond the store's bounds: a request that
// fails with ErrTimeout while it has not passed failed by the store's bounds.
func outageContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func wantTimeout(t *testing.T, ctx context.Context, what string, err error) {
	t.Helper()
	// Every timeout also matches context.DeadlineExceeded, as the net
	// package's do: the file system answers ETIMEDOUT for all alike.
	if !errors.Is(err, staging.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: %v, want ErrTimeout and context.DeadlineExceeded", what, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s: the test's deadline passed first: %v", what, err)
	}
}

// A server that accepts and never answers: every kind of request fails with
// ErrTimeout, naming what it was doing.
func TestS3BlackHole(t *testing.T) {
	s := outageStore(t, blackHole(t))
	ctx := outageContext(t)
	_, err := s.Put(ctx, "k", []byte("small"), staging.PutOptions{})
	wantTimeout(t, ctx, "put", err)
	// Each attempt takes at least the request timeout, so retries stop at
	// the retry max time, well before the SDK's attempt limit.
	if !strings.Contains(err.Error(), "no retry after") {
		t.Errorf("put: %v, want the retries stopped by the retry max time", err)
	}
	_, _, err = s.Get(ctx, "k", staging.Whole())
	wantTimeout(t, ctx, "get", err)
	_, err = s.Head(ctx, "k")
	wantTimeout(t, ctx, "head", err)
	_, err = s.List(ctx, "", "", 10)
	wantTimeout(t, ctx, "list", err)
}

// A server that never reads a large body: the upload stalls once the
// connection's buffers are full, and fails with ErrTimeout.
func TestS3UploadStalls(t *testing.T) {
	s := outageStore(t, blackHole(t))
	ctx := outageContext(t)
	_, err := s.Put(ctx, "big", make([]byte, 32<<20), staging.PutOptions{})
	wantTimeout(t, ctx, "put of 32 MiB", err)
}

// A server that sends its headers and then stops in the middle of the body:
// the read fails with ErrTimeout.
func TestS3DownloadStalls(t *testing.T) {
	s := outageStore(t, stallingServer(t))
	ctx := outageContext(t)
	_, _, err := s.Get(ctx, "k", staging.Whole())
	wantTimeout(t, ctx, "get", err)
	_, _, err = s.Get(ctx, "k", staging.Bytes(0, 1000))
	wantTimeout(t, ctx, "get of a range", err)
}
