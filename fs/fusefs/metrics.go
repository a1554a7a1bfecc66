package fusefs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"ckptfs/fs/engine"
	"ckptfs/staging"
	"ckptfs/wal"
)

// Metrics are the counters of one mount, served in the Prometheus text
// exposition format (version 0.0.4) by the listener of -o metrics=host:port.
// Each FS owns its own: there is no process-wide registry.
type Metrics struct {
	flushes       atomic.Int64
	flushFailures atomic.Int64
	flushNanos    atomic.Int64
	conflicts     atomic.Int64 // retried attempts of flushes that succeeded
	sentAhead     atomic.Int64
	dead          atomic.Int64
	flushed       atomic.Int64
	meta          atomic.Int64

	counting *staging.Counting
	inflight *inflightStore
	wal      wal.Counters // the records of every file's write-ahead log
}

// recordFlush adds what one flush did.
func (m *Metrics) recordFlush(t engine.FlushTiming, err error) {
	if err != nil {
		m.flushFailures.Add(1)
		return
	}
	if t.Attempts == 0 {
		return // nothing changed: no checkpoint was published
	}
	m.flushes.Add(1)
	m.flushNanos.Add(int64(t.Total))
	m.conflicts.Add(int64(t.Attempts - 1))
	m.sentAhead.Add(t.StreamSentBytes)
	m.dead.Add(t.StreamDeadBytes)
	m.flushed.Add(t.StreamFlushBytes)
	m.meta.Add(t.StreamMetaBytes)
}

// flush publishes a checkpoint of of and counts it: every flush of the mount
// goes through here.
func (fsys *FS) flush(ctx context.Context, of *openFile) (engine.FlushTiming, error) {
	t, err := of.f.Flush(ctx)
	fsys.metrics.recordFlush(t, err)
	return t, err
}

// WriteMetrics writes the mount's counters and gauges in the Prometheus text
// format.
func (fsys *FS) WriteMetrics(w io.Writer) error {
	m := fsys.metrics
	fsys.mu.Lock()
	open := len(fsys.files)
	fsys.mu.Unlock()
	c := m.counting.Snapshot()

	bw := bufio.NewWriter(w)
	p := promWriter{w: bw}
	p.metric("ckptfs_flushes_total", "counter", "Checkpoints published.", "", m.flushes.Load())
	p.header("ckptfs_flush_seconds", "summary", "Time of the flushes that published a checkpoint.")
	p.line("ckptfs_flush_seconds_sum", "", strconv.FormatFloat(time.Duration(m.flushNanos.Load()).Seconds(), 'g', -1, 64))
	p.line("ckptfs_flush_seconds_count", "", strconv.FormatInt(m.flushes.Load(), 10))
	p.metric("ckptfs_flush_conflict_retries_total", "counter", "Flush attempts retried after another writer's checkpoint.", "", m.conflicts.Load())
	p.metric("ckptfs_stream_sent_bytes_total", "counter", "Data bytes sent ahead of the flushes, in objects that completed.", "", m.sentAhead.Load())
	p.metric("ckptfs_stream_dead_bytes_total", "counter", "Data bytes sent ahead that were overwritten before their checkpoint.", "", m.dead.Load())
	p.metric("ckptfs_stream_flush_bytes_total", "counter", "Data bytes written by the flushes themselves.", "", m.flushed.Load())
	p.metric("ckptfs_stream_meta_bytes_total", "counter", "Index, summary and header bytes written by the flushes.", "", m.meta.Load())

	p.header("ckptfs_store_requests_total", "counter", "Store requests by operation.")
	for op := staging.OpPut; op <= staging.OpListUploads; op++ {
		p.line("ckptfs_store_requests_total", opLabel(op), strconv.FormatInt(c.Op(op).Requests, 10))
	}
	p.header("ckptfs_store_bytes_sent_total", "counter", "Payload bytes sent to the store.")
	p.line("ckptfs_store_bytes_sent_total", "", strconv.FormatInt(c.Total().BytesSent, 10))
	p.header("ckptfs_store_bytes_received_total", "counter", "Payload bytes received from the store.")
	p.line("ckptfs_store_bytes_received_total", "", strconv.FormatInt(c.Total().BytesReceived, 10))
	p.header("ckptfs_store_requests_in_flight", "gauge", "Store requests started and not returned, by operation.")
	for op := staging.OpPut; op <= staging.OpListUploads; op++ {
		p.line("ckptfs_store_requests_in_flight", opLabel(op), strconv.FormatInt(m.inflight.n[op].Load(), 10))
	}
	p.metric("ckptfs_pieces_in_flight", "gauge", "Object data (puts and parts) being uploaded now.", "",
		m.inflight.n[staging.OpPut].Load()+m.inflight.n[staging.OpUploadPart].Load())

	p.header("ckptfs_errors_total", "counter", "Errors by kind: failed flushes, failed store requests.")
	p.line("ckptfs_errors_total", `kind="flush"`, strconv.FormatInt(m.flushFailures.Load(), 10))
	p.line("ckptfs_errors_total", `kind="store"`, strconv.FormatInt(c.Total().Errors, 10))
	p.header("ckptfs_store_errors_total", "counter", "Failed store requests by operation.")
	for op := staging.OpPut; op <= staging.OpListUploads; op++ {
		p.line("ckptfs_store_errors_total", opLabel(op), strconv.FormatInt(c.Op(op).Errors, 10))
	}

	p.metric("ckptfs_wal_records_total", "counter", "Write-ahead log records stored (each one PUT; concurrent writes share one).", "", m.wal.Records.Load())
	p.metric("ckptfs_wal_writes_total", "counter", "Changes (writes, truncates, hole punches, mtimes) made durable in write-ahead log records.", "", m.wal.Ops.Load())
	p.metric("ckptfs_wal_bytes_total", "counter", "Bytes of write-ahead log records stored.", "", m.wal.Bytes.Load())
	p.metric("ckptfs_wal_record_failures_total", "counter", "Write-ahead log records whose PUT failed (their writes failed).", "", m.wal.Failed.Load())

	p.metric("ckptfs_dirty_bytes", "gauge", "Memory drawn from the mount's budget: dirty blocks and copies in flight.", "", fsys.budget.Used())
	p.metric("ckptfs_memory_limit_bytes", "gauge", "Size of the mount's memory budget.", "", fsys.budget.Limit())
	p.metric("ckptfs_open_files", "gauge", "Files whose engine is open (held by a handle or still dirty).", "", int64(open))
	if p.err != nil {
		return p.err
	}
	return bw.Flush()
}

func opLabel(op staging.Op) string { return `op="` + op.String() + `"` }

// promWriter writes lines of the text exposition format; the first error
// sticks.
type promWriter struct {
	w   *bufio.Writer
	err error
}

func (p *promWriter) header(name, typ, help string) {
	p.printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (p *promWriter) line(name, labels, value string) {
	if labels != "" {
		p.printf("%s{%s} %s\n", name, labels, value)
		return
	}
	p.printf("%s %s\n", name, value)
}

func (p *promWriter) metric(name, typ, help, labels string, v int64) {
	p.header(name, typ, help)
	p.line(name, labels, strconv.FormatInt(v, 10))
}

func (p *promWriter) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

// metricsServer is the HTTP listener of a mount; Close of the FS stops it and
// waits for it.
type metricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// startMetrics listens on addr and serves /metrics until stop.
func (fsys *FS) startMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		fsys.log.Debug("metrics scraped", zap.String("from", r.RemoteAddr))
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if err := fsys.WriteMetrics(w); err != nil {
			fsys.log.Debug("metrics scrape not answered", zap.Error(err))
		}
	})
	s := &metricsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fsys.log.Error("metrics listener stopped", zap.Error(err))
		}
	}()
	fsys.metricsSrv = s
	fsys.log.Info("metrics listening", zap.String("addr", ln.Addr().String()))
	if !loopback(ln.Addr()) {
		// The counters name no file, but they tell anyone who can reach the
		// port how busy the mount is; ":9100" means every interface.
		fsys.log.Warn("metrics listener reachable from other hosts; give a loopback address (127.0.0.1:port) to keep it local",
			zap.String("addr", ln.Addr().String()))
	}
	return nil
}

// loopback says whether a is a TCP address on a loopback interface only (not
// the unspecified address, which is every interface).
func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// stopMetrics closes the listener and its connections and waits for it.
func (fsys *FS) stopMetrics() {
	s := fsys.metricsSrv
	if s == nil {
		return
	}
	s.srv.Close()
	<-s.done
}

// MetricsAddr is the address the metrics listener serves on ("" when off):
// the port the kernel chose for -o metrics=host:0.
func (fsys *FS) MetricsAddr() string {
	if fsys.metricsSrv == nil {
		return ""
	}
	return fsys.metricsSrv.ln.Addr().String()
}

// inflightStore counts the requests in progress to the store it wraps, by
// operation: the uploads in flight of every file of the mount.
type inflightStore struct {
	inner staging.Store
	n     [staging.OpListUploads + 1]atomic.Int64
}

var _ staging.Store = (*inflightStore)(nil)

// begin counts a request of op in progress; call what it returns when the
// request returns.
func (s *inflightStore) begin(op staging.Op) func() {
	s.n[op].Add(1)
	return func() { s.n[op].Add(-1) }
}

func (s *inflightStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (staging.ObjectInfo, error) {
	defer s.begin(staging.OpPut)()
	return s.inner.Put(ctx, key, data, opts)
}

func (s *inflightStore) Get(ctx context.Context, key string, r staging.Range) ([]byte, staging.ObjectInfo, error) {
	defer s.begin(staging.OpGet)()
	return s.inner.Get(ctx, key, r)
}

func (s *inflightStore) Head(ctx context.Context, key string) (staging.ObjectInfo, error) {
	defer s.begin(staging.OpHead)()
	return s.inner.Head(ctx, key)
}

func (s *inflightStore) List(ctx context.Context, prefix, startAfter string, max int) (staging.ListPage, error) {
	defer s.begin(staging.OpList)()
	return s.inner.List(ctx, prefix, startAfter, max)
}

func (s *inflightStore) Delete(ctx context.Context, key string) error {
	defer s.begin(staging.OpDelete)()
	return s.inner.Delete(ctx, key)
}

func (s *inflightStore) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (string, error) {
	defer s.begin(staging.OpCreateMultipart)()
	return s.inner.CreateMultipart(ctx, key, opts)
}

func (s *inflightStore) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (string, error) {
	defer s.begin(staging.OpUploadPart)()
	return s.inner.UploadPart(ctx, key, uploadID, n, data)
}

func (s *inflightStore) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (staging.ObjectInfo, error) {
	defer s.begin(staging.OpCompleteMultipart)()
	return s.inner.CompleteMultipart(ctx, key, uploadID, parts, cond)
}

func (s *inflightStore) AbortMultipart(ctx context.Context, key, uploadID string) error {
	defer s.begin(staging.OpAbortMultipart)()
	return s.inner.AbortMultipart(ctx, key, uploadID)
}

func (s *inflightStore) ListMultipartUploads(ctx context.Context, prefix string) ([]staging.Upload, error) {
	defer s.begin(staging.OpListUploads)()
	return s.inner.ListMultipartUploads(ctx, prefix)
}

// newMetrics wraps st in the counting wrappers the metrics read; the mount
// uses the returned store.
func newMetrics(st staging.Store) (*Metrics, staging.Store) {
	c := staging.NewCounting(st)
	in := &inflightStore{inner: c}
	return &Metrics{counting: c, inflight: in}, in
}
