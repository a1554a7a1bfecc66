package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"

	"github.com/ckptfs/ckptfs/fs/engine"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/counting"
	"github.com/ckptfs/ckptfs/wal"
)

// Metrics are the counters of one mount, served in the Prometheus text
// exposition format by the listener of -o metrics=host:port. Each FS owns
// its own registry: there is no process-wide state, so two mounts in one
// process (the tests) count apart.
//
// Besides the counters, histograms of latency: every FUSE operation by
// name, every store request by operation, and every flush that published a
// checkpoint, with the bytes it had sent ahead; and the process and Go
// runtime collectors.
//
// Every series carries the label volume, the mount's store URL without user
// information or query (metricsVolume): one Prometheus scraping several
// mounts tells them apart, and nothing secret reaches the scrape. The label
// is added by the registerer every collector is registered through
// (Registerer), so one registered later gets it too.
type Metrics struct {
	reg  *prometheus.Registry  // what is gathered
	regr prometheus.Registerer // reg, adding the volume label
	fsys *FS                   // set by New before the listener starts

	flushes       atomic.Int64
	flushFailures atomic.Int64
	conflicts     atomic.Int64 // retried attempts of flushes that succeeded
	sentAhead     atomic.Int64
	dead          atomic.Int64
	flushed       atomic.Int64
	meta          atomic.Int64

	flushSeconds   prometheus.Histogram
	flushSentAhead prometheus.Histogram
	fuseSeconds    *prometheus.HistogramVec
	// copies counts copy_file_range requests by outcome: made by
	// reference, or declined (the kernel copies the bytes).
	copies *prometheus.CounterVec

	counting *counting.Store
	inflight *inflightStore
	wal      wal.Counters // the records of every file's write-ahead log
}

// Latency buckets: from a memory hit (10 µs) to a request that waited on a
// slow link (100 s), in 1-2.5-5 steps. Written as decimal literals so that the
// exposition prints them as they read (le="0.00025", not the
// 0.00024999999999999995 a computed series gives): dashboards and alert
// rules name a bucket by its le.
var latencyBuckets = []float64{
	0.00001, 0.000025, 0.00005,
	0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1, 0.25, 0.5,
	1, 2.5, 5,
	10, 25, 50,
	100,
}

// BuildInfo names the build in ckptfs_build_info; the command fills it from
// its own build information (ckptfs version).
type BuildInfo struct {
	Version string // module version; "" is "(devel)"
	Commit  string // VCS revision, "-modified" appended for a changed tree; "" is "(devel)"
	Go      string // Go version; "" is runtime.Version()
}

// metricsVolume is the volume label of a store URL: without its query and
// fragment (s3:// options, which may carry keys) and without user
// information. Anything up to the last '@' after the scheme goes, even in
// the path: a password holding '/' must not leak, and a prefix holding '@'
// only loses its start in the label.
func metricsVolume(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok || strings.ContainsRune(scheme, '@') {
		scheme, rest = "", u
	} else {
		scheme += "://"
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = rest[at+1:]
	}
	return scheme + rest
}

// newMetrics wraps st in the counting wrappers the metrics read; the mount
// uses the returned store. The FS, once made, sets Metrics.fsys: the gauges
// read at each scrape. volume is the volume label (metricsVolume's).
func newMetrics(st staging.Store, build BuildInfo, volume string) (*Metrics, staging.Store) {
	c := counting.New(st)
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg, regr: prometheus.WrapRegistererWith(prometheus.Labels{"volume": volume}, reg), counting: c}
	if build.Go == "" {
		build.Go = runtime.Version()
	}
	if build.Version == "" {
		build.Version = "(devel)"
	}
	if build.Commit == "" {
		build.Commit = "(devel)"
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ckptfs_build_info", Help: "Always 1; its labels name the build: version, commit, go.",
		ConstLabels: prometheus.Labels{"version": build.Version, "commit": build.Commit, "go": build.Go}})
	buildInfo.Set(1)
	m.flushSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ckptfs_flush_seconds", Help: "Time of the flushes that published a checkpoint.", Buckets: latencyBuckets})
	m.flushSentAhead = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ckptfs_flush_sent_ahead_bytes", Help: "Data bytes a flush that published a checkpoint had sent ahead of it.",
		Buckets: prometheus.ExponentialBuckets(64<<10, 4, 12)}) // 64 KiB to 256 GiB
	m.fuseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ckptfs_fuse_operation_seconds", Help: "Time to answer FUSE requests, by operation.", Buckets: latencyBuckets}, []string{"op"})
	m.copies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ckptfs_copy_file_range_total",
		Help: "copy_file_range requests: how=reference (a copy by reference), piece (a later piece of one), bytes (copied as bytes: by the mount, or declined and by the kernel)."},
		[]string{"how"})
	storeSeconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ckptfs_store_request_seconds", Help: "Time of store requests, by operation.", Buckets: latencyBuckets}, []string{"op"})
	in := &inflightStore{inner: c, walSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ckptfs_wal_append_seconds", Help: "Time of the PUTs storing write-ahead log records: what a write waiting to be durable waits on.",
		Buckets: latencyBuckets})}
	for op := staging.OpPut; op <= staging.OpListUploads; op++ {
		in.seconds[op] = storeSeconds.WithLabelValues(op.String())
	}
	in.answered.Store(time.Now().UnixNano())
	m.inflight = in
	m.regr.MustRegister(buildInfo, m.flushSeconds, m.flushSentAhead, m.fuseSeconds, storeSeconds, in.walSeconds, m.copies,
		&mountCollector{m: m},
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())
	return m, in
}

// MetricsRegisterer registers collectors in the mount's registry, with the
// volume label on their series as on the mount's own.
func (fsys *FS) MetricsRegisterer() prometheus.Registerer { return fsys.metrics.regr }

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
	m.flushSeconds.Observe(t.Total.Seconds())
	m.flushSentAhead.Observe(float64(t.StreamSentBytes))
	m.conflicts.Add(int64(t.Attempts - 1))
	m.sentAhead.Add(t.StreamSentBytes)
	m.dead.Add(t.StreamDeadBytes)
	m.flushed.Add(t.StreamFlushBytes)
	m.meta.Add(t.StreamMetaBytes)
}

// WriteMetrics writes the mount's metrics in the Prometheus text format.
func (fsys *FS) WriteMetrics(w io.Writer) error {
	mfs, err := fsys.metrics.reg.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("write metrics: %w", err)
		}
	}
	return nil
}

// mountCollector reads the mount's counters and gauges at each scrape.
type mountCollector struct{ m *Metrics }

// metricDesc is one metric family the collector gives, with the label it
// varies by ("" for none).
type metricDesc struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

func newDesc(name, help string, typ prometheus.ValueType, labels ...string) metricDesc {
	return metricDesc{desc: prometheus.NewDesc(name, help, labels, nil), typ: typ}
}

var (
	descFlushes      = newDesc("ckptfs_flushes_total", "Checkpoints published.", prometheus.CounterValue)
	descConflicts    = newDesc("ckptfs_flush_conflict_retries_total", "Flush attempts retried after another writer's checkpoint.", prometheus.CounterValue)
	descSent         = newDesc("ckptfs_stream_sent_bytes_total", "Data bytes sent ahead of the flushes, in objects that completed.", prometheus.CounterValue)
	descDead         = newDesc("ckptfs_stream_dead_bytes_total", "Data bytes sent ahead that were overwritten before their checkpoint.", prometheus.CounterValue)
	descFlushed      = newDesc("ckptfs_stream_flush_bytes_total", "Data bytes written by the flushes themselves.", prometheus.CounterValue)
	descMeta         = newDesc("ckptfs_stream_meta_bytes_total", "Index, summary and header bytes written by the flushes.", prometheus.CounterValue)
	descRequests     = newDesc("ckptfs_store_requests_total", "Store requests by operation.", prometheus.CounterValue, "op")
	descRefused      = newDesc("ckptfs_store_refused_total", "Store requests answered as the protocol expects some to be (not found, a condition that did not hold), by operation: not errors.", prometheus.CounterValue, "op")
	descBytesSent    = newDesc("ckptfs_store_bytes_sent_total", "Payload bytes sent to the store.", prometheus.CounterValue)
	descBytesRecv    = newDesc("ckptfs_store_bytes_received_total", "Payload bytes received from the store.", prometheus.CounterValue)
	descInFlight     = newDesc("ckptfs_store_requests_in_flight", "Store requests started and not returned, by operation.", prometheus.GaugeValue, "op")
	descPieces       = newDesc("ckptfs_pieces_in_flight", "Object data (puts and parts) being uploaded now.", prometheus.GaugeValue)
	descErrors       = newDesc("ckptfs_errors_total", "Errors by kind: failed flushes, failed store requests (not counting expected answers such as not found).", prometheus.CounterValue, "kind")
	descTimeouts     = newDesc("ckptfs_store_timeouts_total", "Store requests that failed because the store did not answer in time (staging.ErrTimeout; counted in ckptfs_store_errors_total too), by operation.", prometheus.CounterValue, "op")
	descStoreErrors  = newDesc("ckptfs_store_errors_total", "Failed store requests by operation (not counting expected answers such as not found).", prometheus.CounterValue, "op")
	descWALRecords   = newDesc("ckptfs_wal_records_total", "Write-ahead log records stored (each one PUT; concurrent writes share one).", prometheus.CounterValue)
	descWALWrites    = newDesc("ckptfs_wal_writes_total", "Changes (writes, truncates, hole punches, mtimes) made durable in write-ahead log records.", prometheus.CounterValue)
	descWALBytes     = newDesc("ckptfs_wal_bytes_total", "Bytes of write-ahead log records stored.", prometheus.CounterValue)
	descWALFailures  = newDesc("ckptfs_wal_record_failures_total", "Write-ahead log records whose PUT failed (their writes failed).", prometheus.CounterValue)
	descDirty        = newDesc("ckptfs_dirty_bytes", "Memory drawn from the mount's budget: dirty blocks, copies in flight and the reads' share (ckptfs_read_bytes).", prometheus.GaugeValue)
	descReadHeld     = newDesc("ckptfs_read_bytes", "Memory of the budget's read share held now: cached blocks and blocks fetched ahead of sequential readers.", prometheus.GaugeValue)
	descMemoryLimit  = newDesc("ckptfs_memory_limit_bytes", "Size of the mount's memory budget.", prometheus.GaugeValue)
	descOpenFiles    = newDesc("ckptfs_open_files", "Files whose engine is open (held by a handle or still dirty).", prometheus.GaugeValue)
	mountCollectorDs = []metricDesc{descFlushes, descConflicts, descSent, descDead, descFlushed, descMeta, descRequests, descRefused,
		descBytesSent, descBytesRecv, descInFlight, descPieces, descErrors, descStoreErrors, descTimeouts, descWALRecords, descWALWrites,
		descWALBytes, descWALFailures, descDirty, descReadHeld, descMemoryLimit, descOpenFiles}
)

func (c *mountCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range mountCollectorDs {
		ch <- d.desc
	}
}

func (c *mountCollector) Collect(ch chan<- prometheus.Metric) {
	m, fsys := c.m, c.m.fsys
	emit := func(d metricDesc, v int64, label ...string) {
		ch <- prometheus.MustNewConstMetric(d.desc, d.typ, float64(v), label...)
	}
	counts := m.counting.Snapshot()
	emit(descFlushes, m.flushes.Load())
	emit(descConflicts, m.conflicts.Load())
	emit(descSent, m.sentAhead.Load())
	emit(descDead, m.dead.Load())
	emit(descFlushed, m.flushed.Load())
	emit(descMeta, m.meta.Load())
	for op := staging.OpPut; op <= staging.OpListUploads; op++ {
		o := counts.Op(op)
		emit(descRequests, o.Requests, op.String())
		emit(descRefused, o.Refused, op.String())
		emit(descStoreErrors, o.Errors, op.String())
		emit(descInFlight, m.inflight.n[op].Load(), op.String())
		emit(descTimeouts, m.inflight.timeouts[op].Load(), op.String())
	}
	emit(descBytesSent, counts.Total().BytesSent)
	emit(descBytesRecv, counts.Total().BytesReceived)
	emit(descPieces, m.inflight.n[staging.OpPut].Load()+m.inflight.n[staging.OpUploadPart].Load())
	emit(descErrors, m.flushFailures.Load(), "flush")
	emit(descErrors, counts.Total().Errors, "store")
	emit(descWALRecords, m.wal.Records.Load())
	emit(descWALWrites, m.wal.Ops.Load())
	emit(descWALBytes, m.wal.Bytes.Load())
	emit(descWALFailures, m.wal.Failed.Load())
	if fsys == nil {
		return
	}
	emit(descDirty, fsys.budget.Used())
	emit(descReadHeld, fsys.budget.ReadUsed())
	emit(descMemoryLimit, fsys.budget.Limit())
	fsys.mu.Lock()
	open := len(fsys.files)
	fsys.mu.Unlock()
	emit(descOpenFiles, int64(open))
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
	prom := promhttp.HandlerFor(fsys.metrics.reg, promhttp.HandlerOpts{
		ErrorLog:      promLog{fsys.log},
		ErrorHandling: promhttp.ContinueOnError, // what could be gathered is still served
	})
	mux.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fsys.log.Debug("metrics scraped", zap.String("from", r.RemoteAddr))
		prom.ServeHTTP(w, r)
	}))
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
		// port how busy the mount is; ":9567" means every interface.
		fsys.log.Warn("metrics listener reachable from other hosts; give a loopback address (127.0.0.1:port) to keep it local",
			zap.String("addr", ln.Addr().String()))
	}
	return nil
}

// MetricsProblem is why the metrics listener asked for (-o metrics=) is not
// serving, or nil: the mount goes on without it, and the command tells the
// user.
func (fsys *FS) MetricsProblem() error { return fsys.metricsErr }

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
	// timeouts: requests that failed with staging.ErrTimeout, the store
	// not answering (not the caller's own deadline)
	timeouts [staging.OpListUploads + 1]atomic.Int64
	seconds  [staging.OpListUploads + 1]prometheus.Observer // request latency
	// walSeconds: the latency of the PUTs of WAL records alone, told by
	// their key (walRecordKey)
	walSeconds prometheus.Histogram
	// answered: when (Unix ns) the store last answered a request, success
	// or a refusal of its own (storeAnswered): the clock of op_timeout
	answered atomic.Int64
	// staleSaid: a stat answered from memory was logged in this outage
	staleSaid atomic.Bool
}

// inFlight is the number of store requests under way.
func (s *inflightStore) inFlight() int64 {
	var n int64
	for i := range s.n {
		n += s.n[i].Load()
	}
	return n
}

var _ staging.Store = (*inflightStore)(nil)

// begin counts a request of op in progress; call what it returns with the
// request's error when the request returns.
func (s *inflightStore) begin(op staging.Op) func(*error) {
	s.n[op].Add(1)
	start := time.Now()
	return func(err *error) {
		s.n[op].Add(-1)
		if o := s.seconds[op]; o != nil {
			o.Observe(time.Since(start).Seconds())
		}
		if errors.Is(*err, staging.ErrTimeout) {
			s.timeouts[op].Add(1)
		}
		if storeAnswered(*err) {
			s.answered.Store(time.Now().UnixNano())
			s.staleSaid.Store(false)
		}
	}
}

func (s *inflightStore) Put(ctx context.Context, key string, data []byte, opts staging.PutOptions) (_ staging.ObjectInfo, err error) {
	defer s.begin(staging.OpPut)(&err)
	if s.walSeconds != nil && walRecordKey(key) {
		defer func(start time.Time) { s.walSeconds.Observe(time.Since(start).Seconds()) }(time.Now())
	}
	return s.inner.Put(ctx, key, data, opts)
}

// walRecordKey says whether key is a file's write-ahead log record
// (wal.RecordKey's form: ...<wal.Dir><digits>).
func walRecordKey(key string) bool {
	i := strings.LastIndex(key, wal.Dir)
	if i < 0 {
		return false
	}
	_, ok := wal.ParseRecordName(key[i+len(wal.Dir):])
	return ok
}

func (s *inflightStore) Get(ctx context.Context, key string, r staging.Range) (_ []byte, _ staging.ObjectInfo, err error) {
	defer s.begin(staging.OpGet)(&err)
	return s.inner.Get(ctx, key, r)
}

func (s *inflightStore) Head(ctx context.Context, key string) (_ staging.ObjectInfo, err error) {
	defer s.begin(staging.OpHead)(&err)
	return s.inner.Head(ctx, key)
}

func (s *inflightStore) List(ctx context.Context, prefix, startAfter string, max int) (_ staging.ListPage, err error) {
	defer s.begin(staging.OpList)(&err)
	return s.inner.List(ctx, prefix, startAfter, max)
}

func (s *inflightStore) Delete(ctx context.Context, key string) (err error) {
	defer s.begin(staging.OpDelete)(&err)
	return s.inner.Delete(ctx, key)
}

func (s *inflightStore) CreateMultipart(ctx context.Context, key string, opts staging.PutOptions) (_ string, err error) {
	defer s.begin(staging.OpCreateMultipart)(&err)
	return s.inner.CreateMultipart(ctx, key, opts)
}

func (s *inflightStore) UploadPart(ctx context.Context, key, uploadID string, n int32, data []byte) (_ string, err error) {
	defer s.begin(staging.OpUploadPart)(&err)
	return s.inner.UploadPart(ctx, key, uploadID, n, data)
}

var _ staging.PartKeeper = (*inflightStore)(nil)

func (s *inflightStore) PutKept(ctx context.Context, key string, data []byte, opts staging.PutOptions) (_ staging.ObjectInfo, _ bool, err error) {
	defer s.begin(staging.OpPut)(&err)
	return staging.PutGiven(ctx, s.inner, key, data, opts)
}

func (s *inflightStore) UploadPartKept(ctx context.Context, key, uploadID string, n int32, data []byte) (_ string, _ bool, err error) {
	defer s.begin(staging.OpUploadPart)(&err)
	return staging.UploadPartGiven(ctx, s.inner, key, uploadID, n, data)
}

func (s *inflightStore) CompleteMultipart(ctx context.Context, key, uploadID string, parts []staging.CompletedPart, cond staging.Conditions) (_ staging.ObjectInfo, err error) {
	defer s.begin(staging.OpCompleteMultipart)(&err)
	return s.inner.CompleteMultipart(ctx, key, uploadID, parts, cond)
}

func (s *inflightStore) AbortMultipart(ctx context.Context, key, uploadID string) (err error) {
	defer s.begin(staging.OpAbortMultipart)(&err)
	return s.inner.AbortMultipart(ctx, key, uploadID)
}

func (s *inflightStore) ListMultipartUploads(ctx context.Context, prefix string) (_ []staging.Upload, err error) {
	defer s.begin(staging.OpListUploads)(&err)
	return s.inner.ListMultipartUploads(ctx, prefix)
}

// promLog passes the metrics handler's errors (a scrape that could not be
// gathered or written) to the mount's log.
type promLog struct{ log *zap.Logger }

func (l promLog) Println(v ...any) {
	l.log.Debug("metrics scrape", zap.String("error", fmt.Sprint(v...)))
}
