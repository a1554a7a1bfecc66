package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ckptfs/ckptfs/config"
	"github.com/ckptfs/ckptfs/fs/fusefs"
	"github.com/ckptfs/ckptfs/fs/volume"
	"github.com/ckptfs/ckptfs/staging"
	"github.com/ckptfs/ckptfs/staging/dir"
	"github.com/ckptfs/ckptfs/staging/limit"
	"github.com/ckptfs/ckptfs/staging/link"
	"github.com/ckptfs/ckptfs/staging/mem"
	"github.com/ckptfs/ckptfs/staging/s3"
)

// daemonEnv marks the detached child of a mount; its value is the number of
// the file descriptor of the pipe to the parent.
const daemonEnv = "CKPTFS_DAEMON_FD"

// defaultMountTimeout bounds what a mount does before it serves (reaching
// the store, reading the volume and the namespace) unless mount_timeout=
// says otherwise.
const defaultMountTimeout = 2 * time.Minute

// mountArgs is a parsed command line of mount.
type mountArgs struct {
	store, mountpoint string
	opts              []string // -o items, in order
	foreground        bool
}

// mountFunc runs a parsed mount and returns its exit status, having printed
// why it failed.
type mountFunc func(m mountArgs, stdout, stderr io.Writer) int

// newMountCmd is "ckptfs mount", and "mount.ckptfs" (see helperArgs): the
// flags may come before or after STORE MOUNTPOINT, as mount(8) puts them.
func newMountCmd(mount mountFunc) *cobra.Command {
	var m mountArgs
	var sloppy, noMtab, verbose, debug bool
	c := &cobra.Command{
		Use:   "mount [flags] STORE MOUNTPOINT",
		Short: "mount the volume of STORE at MOUNTPOINT",
		Long: "ckptfs mount: mounts the volume of STORE at MOUNTPOINT.\n\n" +
			storesText + "\n\n" + mountText + "\n\n" +
			"Which options matter for a workload, and what each buys and costs: docs/tuning.md.\n\n" +
			storeOptsHelp(),
		Example: "  ckptfs mount -o endpoint=http://127.0.0.1:7070,path_style s3://bucket/vol1 /mnt/vol1\n" +
			"  mount.ckptfs s3://bucket/vol1 /mnt/vol1 -o _netdev,endpoint=http://127.0.0.1:7070,path_style",
		Annotations: map[string]string{helpMore: tunablesText()},
		Args:        argsBetween(2, 2, "STORE and MOUNTPOINT"),
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return []cobra.Completion{"s3://", "file:///", "mem://"}, cobra.ShellCompDirectiveNoSpace
			}
			if len(args) == 1 {
				return nil, cobra.ShellCompDirectiveFilterDirs
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			m.store, m.mountpoint = args[0], args[1]
			if debug {
				m.opts = append(m.opts, "log=debug")
			}
			// Before detaching, so that a bad option is a usage error
			// (exit 2) as with every command; the mount reads them again.
			if _, _, err := parseMountOpts(m.opts); err != nil {
				return err
			}
			if _, err := parseStore(m.store); err != nil {
				return err
			}
			if code := mount(m, c.OutOrStdout(), c.ErrOrStderr()); code != exitOK {
				return exitStatus(code)
			}
			return nil
		},
	}
	addOptsFlag(c, &m.opts, "mount options: store options and tunables (repeatable; see below)")
	c.Flags().BoolVarP(&m.foreground, "foreground", "f", false, "stay in the foreground (log to stderr unless log_file=)")
	// s3fs's and mountpoint-s3's -d/--debug: the level only. It does not
	// keep the mount in the foreground as libfuse's -d does: -f does that.
	c.Flags().BoolVarP(&debug, "debug", "d", false, "log at the debug level (as -o log=debug, which it overrides)")
	// mount(8) passes these to helpers: sloppy, no mtab, verbose. They
	// change nothing here.
	c.Flags().BoolVarP(&sloppy, "sloppy", "s", false, "ignored (mount(8) passes it)")
	c.Flags().BoolVarP(&noMtab, "no-mtab", "n", false, "ignored (mount(8) passes it)")
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "ignored (mount(8) passes it)")
	for _, name := range []string{"sloppy", "no-mtab", "verbose"} {
		c.Flags().MarkHidden(name)
	}
	return c
}

// storeOpts are the -o items that choose and reach the store; they are not
// tunables.
type storeOpts struct {
	endpoint, region, profile string
	pathStyle                 bool
	// S3 only (s3.Config checks them)
	sse, sseKMSKeyID, storageClass, checksum string
	caBundle                                 string // absolute
	credentialsFile                          string // absolute
	requesterPays                            bool
	logFile                                  string        // not a store option: where a detached mount logs
	timeouts                                 s3.Timeouts   // from the mount's configuration; zero: defaults
	create                                   bool          // create the volume if there is none
	singleWriter                             bool          // mount even if the store ignores conditions
	mountTimeout                             time.Duration // bound on the start; zero: defaultMountTimeout
	logger                                   *zap.Logger   // not a store option: the mount's log, for the AWS SDK's lines (nil: dropped)
}

// startBound is the bound on reaching the store and opening the volume.
func (so storeOpts) startBound() time.Duration {
	if so.mountTimeout > 0 {
		return so.mountTimeout
	}
	return defaultMountTimeout
}

// takeStoreOpts removes the store options from opts and returns them with
// what remains.
func takeStoreOpts(opts []string) (storeOpts, []string, error) {
	var so storeOpts
	var rest []string
	for _, item := range opts {
		name, value, has := strings.Cut(item, "=")
		// s3fs's names for path_style, log_file and credentials_file
		// (whose s3fs format the file's text tells).
		switch name {
		case "use_path_request_style":
			name = "path_style"
		case "logfile":
			name = "log_file"
		case "passwd_file":
			name = "credentials_file"
		}
		switch name {
		case "use_sse":
			sse, key, err := s3fsSSE(value, has)
			if err != nil {
				return so, nil, fmt.Errorf("option %s: %w", item, err)
			}
			so.sse = sse
			if key != "" {
				so.sseKMSKeyID = key
			}
			continue
		case "endpoint":
			so.endpoint = endpointURL(value)
		case "region":
			so.region = value
		case "profile":
			so.profile = value
		case "log_file":
			so.logFile = value
		case "sse":
			so.sse = value
		case "sse_kms_key_id":
			so.sseKMSKeyID = value
		case "storage_class":
			// S3's classes are upper case; s3fs and rclone take any.
			so.storageClass = strings.ToUpper(value)
		case "checksum":
			so.checksum = value
		case "ca_bundle", "credentials_file":
			// A detached mount may not run in this directory.
			if value != "" {
				abs, err := filepath.Abs(value)
				if err != nil {
					return so, nil, fmt.Errorf("option %s=%q: %w", name, value, err)
				}
				value = abs
			}
			if name == "ca_bundle" {
				so.caBundle = value
			} else {
				so.credentialsFile = value
			}
		case "mount_timeout":
			d, err := config.ParseDuration(value)
			if err != nil || d <= 0 {
				return so, nil, fmt.Errorf("option mount_timeout=%q: want a positive duration such as 2m or 1h", value)
			}
			so.mountTimeout = d
		case "path_style", "create", "single_writer", "requester_pays":
			on := true
			if has {
				switch value {
				case "true", "on", "yes", "1":
				case "false", "off", "no", "0":
					on = false
				default:
					return so, nil, fmt.Errorf("option %s=%q: want true or false", name, value)
				}
			}
			switch name {
			case "path_style":
				so.pathStyle = on
			case "create":
				so.create = on
			case "requester_pays":
				so.requesterPays = on
			default:
				so.singleWriter = on
			}
			continue
		default:
			rest = append(rest, item)
			continue
		}
		if !has || value == "" {
			return so, nil, fmt.Errorf("option %s needs a value: %s=...", name, name)
		}
	}
	return so, rest, nil
}

// endpointURL is the endpoint option as a URL: host:port without a scheme
// is taken as http://host:port, as s3fs's url= and most tools' endpoints
// read a bare address of a local server.
func endpointURL(v string) string {
	if v == "" || strings.Contains(v, "://") {
		return v
	}
	if _, port, err := net.SplitHostPort(v); err == nil && port != "" {
		return "http://" + v
	}
	return v
}

// s3fsSSE reads s3fs's use_sse option: bare, 1 or true is SSE-S3 (AES256);
// kmsid or k is SSE-KMS with the account's key, kmsid:ID or k:ID with key
// ID; 0 or false is none. SSE-C (custom, c) is refused: ckptfs keeps no
// customer keys.
func s3fsSSE(value string, has bool) (sse, kmsKeyID string, err error) {
	if !has {
		return "AES256", "", nil
	}
	kind, key, hasKey := strings.Cut(value, ":")
	switch strings.ToLower(kind) {
	case "1", "true", "on", "yes":
		if !hasKey {
			return "AES256", "", nil
		}
	case "0", "false", "off", "no":
		if !hasKey {
			return "", "", nil
		}
	case "kmsid", "k":
		if hasKey && key == "" {
			return "", "", errors.New("want kmsid:KEY-ID with a key")
		}
		return "aws:kms", key, nil
	case "custom", "c":
		return "", "", errors.New("SSE-C (customer-provided keys) is not supported: use sse=aws:kms or sse=AES256")
	}
	return "", "", errors.New("want use_sse (AES256), use_sse=kmsid or use_sse=kmsid:KEY-ID (aws:kms); sse= takes the S3 names")
}

// s3Only is the first option given that only an S3 store takes, or "": one
// given for another store would be silently ignored (sse on a directory
// encrypts nothing).
func (so storeOpts) s3Only() string {
	for _, o := range []struct {
		name string
		set  bool
	}{
		{"endpoint", so.endpoint != ""}, {"region", so.region != ""}, {"profile", so.profile != ""},
		{"credentials_file", so.credentialsFile != ""},
		{"path_style", so.pathStyle},
		{"sse", so.sse != ""}, {"sse_kms_key_id", so.sseKMSKeyID != ""}, {"storage_class", so.storageClass != ""},
		{"checksum", so.checksum != ""}, {"ca_bundle", so.caBundle != ""}, {"requester_pays", so.requesterPays},
	} {
		if o.set {
			return o.name
		}
	}
	return ""
}

// parseStore reads STORE. One that is none of its forms is a usage error
// (exit 2), as a wrong number of arguments is: the command line is wrong,
// not the store.
func parseStore(spec string) (*url.URL, error) {
	u, err := url.Parse(spec)
	spec = staging.RedactURL(spec) // only printed from here on
	if err != nil {
		var ue *url.Error // its text repeats the URL
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &usageError{fmt.Errorf("store %q: %w", spec, err)}
	}
	switch u.Scheme {
	case "mem":
	case "file":
		if u.Host != "" || u.User != nil || !filepath.IsAbs(u.Path) {
			return nil, usagef("store %q: want file:///absolute/dir", spec)
		}
	case "s3":
		if u.Host == "" {
			return nil, usagef("store %q: want s3://bucket[/prefix]", spec)
		}
	default:
		return nil, usagef("store %q: want s3://bucket[/prefix], file:///dir or mem://", spec)
	}
	return u, nil
}

// openStore opens STORE; it returns the store, the volume root in it and the
// name shown in the mount table.
func openStore(ctx context.Context, spec string, so storeOpts) (staging.Store, string, error) {
	u, err := parseStore(spec)
	if err != nil {
		return nil, "", err
	}
	spec = staging.RedactURL(spec) // only printed from here on
	if u.Scheme != "s3" {
		if name := so.s3Only(); name != "" {
			return nil, "", fmt.Errorf("store %s: option %s is for s3:// stores only", spec, name)
		}
	}
	switch u.Scheme {
	case "mem":
		return mem.New(), "", nil
	case "file":
		d, err := dir.New(u.Path)
		if err != nil {
			return nil, "", fmt.Errorf("store %s: %w", spec, err)
		}
		return d, "", nil
	case "s3":
		prefix := strings.Trim(u.Path, "/")
		if prefix != "" {
			prefix += "/"
		}
		s, err := s3.New(ctx, s3.Config{
			Bucket: u.Host, Prefix: prefix, Endpoint: so.endpoint, Region: so.region,
			PathStyle: so.pathStyle, Profile: so.profile, CredentialsFile: so.credentialsFile, Timeouts: so.timeouts,
			SSE: so.sse, SSEKMSKeyID: so.sseKMSKeyID, StorageClass: so.storageClass,
			RequesterPays: so.requesterPays, CABundle: so.caBundle, Checksum: so.checksum,
			Logger: so.logger,
		})
		if err != nil {
			return nil, "", fmt.Errorf("store %s: %w", spec, s3.ExplainNew(u.Host, err))
		}
		return s, "", nil
	}
	return nil, "", fmt.Errorf("store %q: want s3://bucket[/prefix], file:///dir or mem://", spec) // parseStore refused it
}

// descriptorShown is the volume descriptor of the store spec as the store
// shows it (s3://bucket/prefix/ckptfs.json, file:///dir/ckptfs.json), for
// a message that says it is missing: the object a user looks for with the
// store's own tools. A volume is at the root of its store (openStore's
// root is always empty).
func descriptorShown(spec string) string {
	shown := redactStore(spec)
	if !strings.HasSuffix(shown, "://") {
		shown = strings.TrimRight(shown, "/") + "/"
	}
	return shown + volume.DescriptorKey
}

// redactStore drops user information (a key or password someone put in the
// URL) from STORE, for the log and the mount table.
func redactStore(spec string) string { return staging.RedactURL(spec) }

// logSink makes the cores of one log destination at a level; nil is no
// log at all.
type logSink func(zapcore.LevelEnabler) zapcore.Core

// writerSink is a log written to w, one console line per entry.
func writerSink(w io.Writer) logSink {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	ws := zapcore.Lock(zapcore.AddSync(w))
	return func(l zapcore.LevelEnabler) zapcore.Core {
		return zapcore.NewCore(zapcore.NewConsoleEncoder(enc), ws, l)
	}
}

// mountLoggers are the mount's log at level, and the one of its start and
// end (mounted, unmounting, unmounted): the same destination, at info or
// the level if lower, when detached, unless level is above warn (error:
// the user asked for errors only). A mount in the foreground says them at
// the level alone: its terminal shows the mount succeed and end.
func mountLoggers(sink logSink, level config.LogLevel, detached bool) (log, life *zap.Logger) {
	if sink == nil {
		return zap.NewNop(), zap.NewNop()
	}
	l := level.ZapLevel()
	log = zap.New(sink(l)).Named("ckptfs")
	if !detached || l > zapcore.WarnLevel || l <= zapcore.InfoLevel {
		return log, log
	}
	return log, zap.New(sink(zapcore.InfoLevel)).Named("ckptfs")
}

// userError is an error as the command prints it: one line for the user,
// with the error it explains still reachable by errors.Is and errors.As.
type userError struct {
	msg string
	err error
}

func (e *userError) Error() string { return e.msg }
func (e *userError) Unwrap() error { return e.err }

// explainStart turns a failure to reach the store or open the volume into
// the line the user reads: a missing volume says how to create one, an S3
// failure names the bucket, the endpoint and what to check, and a start cut
// short by mount_timeout says so.
func explainStart(ctx context.Context, err error, st staging.Store, spec string, so storeOpts) error {
	if err == nil {
		return nil
	}
	shown := redactStore(spec)
	if errors.Is(err, fusefs.ErrNoVolume) {
		return &userError{fmt.Sprintf("no ckptfs volume at %s (no %s there); create one with \"ckptfs format %s\" or mount with -o create",
			shown, descriptorShown(spec), shown), err}
	}
	where := shown
	if s3, ok := st.(*s3.Store); ok {
		err = s3.Explain(err)
		where = s3.ShownEndpoint()
	}
	if ctx.Err() == context.DeadlineExceeded {
		// What the last attempt met says more than "deadline exceeded".
		what := err.Error()
		var p *s3.Problem
		if !errors.As(err, &p) {
			if s3, ok := st.(*s3.Store); ok {
				// The deadline hides what the attempts met: see whether
				// the endpoint takes connections at all.
				dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if derr := s3.Diagnose(dctx); errors.As(derr, &p) {
					err = &userError{err.Error(), errors.Join(err, derr)}
				}
				cancel()
			}
		}
		if p != nil {
			what = p.Error()
		}
		return &userError{fmt.Sprintf("gave up after mount_timeout=%v reaching %s: %s", so.startBound(), where, what), err}
	}
	return err
}

// openFS opens the store and the volume of a mount and checks that the store
// honours conditional writes; warn receives what the user should know
// before the mount detaches. Every error is one line for the user.
func openFS(spec string, so storeOpts, cfg config.Config, log *zap.Logger, warn func(string)) (*fusefs.FS, error) {
	return openFSWrapped(spec, so, cfg, log, warn, nil)
}

// openFSWrapped is openFS with the store wrapped (tests: a store that
// misbehaves).
func openFSWrapped(spec string, so storeOpts, cfg config.Config, log *zap.Logger, warn func(string), wrap func(staging.Store) staging.Store) (*fusefs.FS, error) {
	// A read-only mount sends no write request (read-only credentials
	// must do): it creates nothing and skips the conditional-write check,
	// which only matters to writers.
	if cfg.ReadOnly && so.create {
		return nil, &userError{"-o ro with -o create: a read-only mount creates nothing; create the volume with \"ckptfs format\" or a mount without ro", nil}
	}
	ctx, cancel := context.WithTimeout(context.Background(), so.startBound())
	defer cancel()
	so.timeouts, so.logger = cfg.S3Timeouts(), log
	raw, root, err := openStore(ctx, spec, so)
	if err != nil {
		return nil, explainStart(ctx, err, nil, spec, so)
	}
	st := raw
	// The mount-wide cap goes first, next to the store, so that it bounds
	// the requests that reach it, whatever wraps it for tests or benchmarks.
	if cfg.MaxRequests > 0 {
		st = limit.New(st, cfg.MaxRequests)
	}
	if wrap != nil {
		st = wrap(st)
	}
	if cfg.EmulateLink != config.LinkNone {
		p, err := link.ProfileByName(cfg.EmulateLink.String())
		if err != nil {
			return nil, fmt.Errorf("option emulate_link: %w", err)
		}
		st = link.New(st, p)
	}
	// mem:// is new at every mount: there is nothing to mistype.
	isMem := strings.HasPrefix(spec, "mem:")
	fsys, err := fusefs.New(ctx, st, fusefs.Options{Config: cfg, Root: root, Logger: log,
		FsName: redactStore(spec), RequireVolume: cfg.ReadOnly || (!so.create && !isMem),
		Build: buildInfo(), VolumeURL: spec})
	if cfg.ReadOnly && errors.Is(err, fusefs.ErrNoVolume) {
		return nil, &userError{fmt.Sprintf("no ckptfs volume at %s (no %s there), and a read-only mount creates none; create it with \"ckptfs format %s\"",
			redactStore(spec), descriptorShown(spec), redactStore(spec)), err}
	}
	if err != nil {
		return nil, explainStart(ctx, err, raw, spec, so)
	}
	if merr := fsys.MetricsProblem(); merr != nil {
		warn(fmt.Sprintf("%v: mounted without metrics; give -o metrics= a free address (or none) to have them", merr))
	}
	if cfg.ReadOnly {
		return fsys, nil
	}
	if err := probeConditions(ctx, st, root); err != nil {
		if !errors.Is(err, errNoConditions) {
			fsys.Close()
			return nil, explainStart(ctx, err, raw, spec, so)
		}
		if !so.singleWriter {
			fsys.Close()
			return nil, &userError{fmt.Sprintf("%s: %v; two mounts of one volume rely on them, so this mount is refused; "+
				"mount with -o single_writer if this volume is never mounted twice at once", redactStore(spec), err), err}
		}
		msg := fmt.Sprintf("%s: %v; mounted anyway (single_writer): two mounts of this volume at once would corrupt it", redactStore(spec), err)
		log.Warn("conditional writes not honoured", zap.String("store", redactStore(spec)), zap.Error(err))
		warn(msg)
	}
	return fsys, nil
}

// mountMain mounts, detaching unless m.foreground; a detached mount is
// this program started again with the same arguments.
func mountMain(m mountArgs, stdout, stderr io.Writer) int {
	if os.Getenv(daemonEnv) == "" && !m.foreground {
		return detach(stderr)
	}
	report := childReport()
	fail := func(err error) int { return reportFailure(report, stderr, err) }
	// warn keeps what the user should know of a mount that succeeds, told
	// before it detaches (a failed mount says only why it failed).
	var warnings []string
	warn := func(msg string) { warnings = append(warnings, strings.ReplaceAll(msg, "\n", "; ")) }
	so, cfg, err := parseMountOpts(m.opts)
	if err != nil {
		return fail(err)
	}
	// Before the store is reached: a mount here would stack on the one
	// already there.
	cleared, err := checkMountPoint(m.mountpoint)
	if err != nil {
		return fail(err)
	}
	if cleared != "" {
		warn(cleared)
	}
	sink, logFile, note, err := mountLogSink(so, cfg, report != nil, stderr, warn)
	if err != nil {
		return fail(err)
	}
	if logFile != nil {
		defer logFile.Close()
	}
	// life logs the mount's start and end: a detached mount, or one that
	// systemd runs (Type=notify), says them at the default level too,
	// having no terminal to say them on.
	log, life := mountLoggers(sink, cfg.Log, report != nil || os.Getenv("NOTIFY_SOCKET") != "")
	defer log.Sync()
	if note != "" {
		life.Info(note) // at the default level too, as the start's lines
	}

	setHeapLimit(cfg.MemoryLimit)
	fsys, err := openFS(m.store, so, cfg, log, warn)
	if err != nil {
		return fail(err)
	}
	mount := func() error { return fsys.Mount(m.mountpoint) }
	if report != nil {
		err = mountDetached(mount)
	} else {
		err = mount()
	}
	if err != nil {
		fsys.Close()
		return fail(err)
	}
	life.Info("mounted", zap.String("store", redactStore(m.store)), zap.String("mountpoint", m.mountpoint),
		zap.String("version", version()),
		zap.String("memory_limit", config.FormatSize(cfg.MemoryLimit)),
		zap.String("stream_segment_bytes", config.FormatSize(cfg.EffectiveStreamSegmentBytes())),
		zap.Bool("wal", cfg.WAL), zap.Bool("ro", cfg.ReadOnly),
		zap.String("options", cfg.EncodeChanged(config.MountDefault(config.TotalRAM()))),
		zap.Int("pid", os.Getpid()))
	reportMounted(report, stderr, warnings)

	// CKPTFS_CPUPROFILE=path profiles the mount's CPU until it unmounts:
	// where the time of a benchmark through the mount goes.
	if path := os.Getenv("CKPTFS_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err != nil {
			log.Warn("cpu profile not written", zap.Error(err))
		} else if err := pprof.StartCPUProfile(f); err != nil {
			log.Warn("cpu profile not written", zap.Error(err))
			f.Close()
		} else {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}

	// The connection, while the mount point still shows it: a stop of a
	// busy mount ends it (stopMount).
	conn := fuseConnection(m.mountpoint)
	sdNotify(log, daemon.SdNotifyReady)
	reopen := func() { reopenLog(log, logFile) }
	return serveUntilStopped(fsys, m.mountpoint, conn, log, life, reopen, stderr)
}

// fallbackLogFile is where a detached mount logs when there is no journal
// and no system log, and no log_file= (when it may write there: root).
const fallbackLogFile = "/var/log/ckptfs.log"

// mountLogSink is where a mount logs: log_file= when given; detached, the
// journal under systemd, else the system log, else fallbackLogFile; in the
// foreground, stderr. logFile is the file it opened (log_file= or the
// fallback), for the caller to close and SIGHUP to reopen (nil without
// one); warn receives why a detached mount's log is discarded, and note,
// for the log itself, why it went to fallbackLogFile.
func mountLogSink(so storeOpts, cfg config.Config, detached bool, stderr io.Writer, warn func(string)) (sink logSink, logFile *reopenFile, note string, err error) {
	var jc *journalCore
	if detached && so.logFile == "" {
		jc = newJournalCore(cfg.Log.ZapLevel())
	}
	switch {
	case so.logFile != "":
		if logFile, err = openLogFile(so.logFile); err != nil {
			return nil, nil, "", fmt.Errorf("option log_file: %w", err)
		}
		sink = writerSink(logFile)
	case jc != nil:
		// Detached, under systemd: the journal, with structured fields.
		sink = jc.withLevel
	case detached:
		// Detached: no terminal. The system log.
		sc, err := newSyslogCore(cfg.Log.ZapLevel())
		if err == nil {
			sink = sc.withLevel
			break
		}
		if f, ferr := openLogFile(fallbackLogFile); ferr == nil {
			// Where the help says the log goes: a note in the log, not
			// a warning at every mount (a container has no /dev/log).
			logFile, sink = f, writerSink(f)
			note = fmt.Sprintf("no journal and no system log (/dev/log): logging to %s; -o log_file=PATH chooses another file", fallbackLogFile)
		} else {
			warn(fmt.Sprintf("%v, and %v: the mount's log is discarded; give -o log_file=PATH to keep it", err, ferr))
		}
	default:
		sink = writerSink(stderr)
	}
	return sink, logFile, note, nil
}

// reopenLog reopens the log file on SIGHUP (logrotate); logFile is nil
// without one.
func reopenLog(log *zap.Logger, logFile *reopenFile) {
	if logFile == nil {
		log.Info("SIGHUP: no log file to reopen")
		return
	}
	if err := logFile.Reopen(); err != nil {
		log.Error("log file not reopened", zap.String("path", logFile.path), zap.Error(err))
		return
	}
	log.Info("log file reopened", zap.String("path", logFile.path))
}

// childReport is, in the detached child of a mount, its end of the pipe to
// the parent waiting in detach; nil in a mount in the foreground.
func childReport() *os.File {
	if fd := os.Getenv(daemonEnv); fd != "" {
		os.Unsetenv(daemonEnv)
		return os.NewFile(3, "report")
	}
	return nil
}

// reportFailure says why the mount failed, to the parent (report, nil in
// the foreground) and on stderr, and returns the exit status.
func reportFailure(report *os.File, stderr io.Writer, err error) int {
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	if report != nil {
		fmt.Fprintf(report, "error: %s\n", msg)
		report.Close()
	}
	fmt.Fprintf(stderr, "ckptfs mount: %s\n", msg)
	return 1
}

// reportMounted tells the parent (report, nil in the foreground) the
// warnings, one a line, then that the volume is mounted; the warnings go to
// stderr too.
func reportMounted(report *os.File, stderr io.Writer, warnings []string) {
	for _, w := range warnings {
		if report != nil {
			fmt.Fprintf(report, "warning: %s\n", w)
		}
		fmt.Fprintf(stderr, "ckptfs mount: warning: %s\n", w)
	}
	if report != nil {
		fmt.Fprintln(report, "mounted")
		report.Close()
	}
}

// detach starts this command again in the background, with the same
// arguments, and waits until the child reports that the volume is mounted or
// why it is not.
func detach(stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs mount: %v\n", err)
		return 1
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(stderr, "ckptfs mount: %v\n", err)
		return 1
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), daemonEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, devnull
		defer devnull.Close()
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "ckptfs mount: start: %v\n", err)
		return 1
	}
	w.Close()
	// The child writes "mounted" or the error, then closes its end.
	b, err := io.ReadAll(r)
	r.Close()
	// Warnings come first, one a line; the last line is the outcome.
	var line string
	for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if w, ok := strings.CutPrefix(l, "warning: "); ok {
			fmt.Fprintf(stderr, "ckptfs mount: warning: %s\n", w)
			continue
		}
		line = l
	}
	if line == "mounted" {
		cmd.Process.Release()
		return 0
	}
	if line == "" {
		st, werr := cmd.Process.Wait()
		fmt.Fprintf(stderr, "ckptfs mount: the mount process ended without a report (%v %v %v)\n", st, werr, err)
		return 1
	}
	cmd.Process.Wait()
	fmt.Fprintf(stderr, "ckptfs mount: %s\n", strings.TrimPrefix(line, "error: "))
	return 1
}

// heapSlack is what the mount's heap holds beyond memory_limit's budget:
// the block map's nodes, requests' buffers, the runtime's own. The Go
// limit counts the memory Go maps (heap, stacks, its metadata), not the
// binary's own pages (about 20 MiB resident), so 40 MiB here keeps the
// process's resident set within memory_limit + 64 MiB.
const heapSlack = 40 << 20

// setHeapLimit makes the garbage collector keep the heap near the memory
// budget (memory_limit plus heapSlack) instead of letting it grow to twice
// the live data between collections: the budget bounds what ckptfs holds,
// and this bounds what the process keeps of what it no longer holds. The
// limit is soft: live data above it slows collection, it never fails. A
// GOMEMLIMIT in the environment wins.
func setHeapLimit(budget int64) {
	if os.Getenv("GOMEMLIMIT") != "" || budget <= 0 {
		return
	}
	debug.SetMemoryLimit(budget + heapSlack)
}
