package main

import (
	"fmt"
	"log/syslog"
	"os"
	"sync"

	"go.uber.org/zap/zapcore"
)

// reopenFile is a log file that Reopen opens again by name, so that after
// logrotate renamed it (and sent SIGHUP) the log goes to a new file.
type reopenFile struct {
	path string
	mu   sync.Mutex
	f    *os.File // GUARDED_BY(mu)
}

func openLogFile(path string) (*reopenFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &reopenFile{path: path, f: f}, nil
}

func (r *reopenFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Write(p)
}

func (r *reopenFile) Sync() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Sync()
}

// Reopen opens the path again and closes the old file; on failure the old
// file stays in use.
func (r *reopenFile) Reopen() error {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("reopen log file: %w", err)
	}
	r.mu.Lock()
	old := r.f
	r.f = f
	r.mu.Unlock()
	return old.Close()
}

func (r *reopenFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}

// syslogCore writes zap entries to the system log, each at the syslog
// priority of its level, with the fields as the console encoder prints
// them (the time is the log's own).
type syslogCore struct {
	zapcore.LevelEnabler
	enc zapcore.Encoder
	w   *syslog.Writer
}

// newSyslogCore connects to the local system log (/dev/log) as tag ckptfs.
func newSyslogCore(level zapcore.LevelEnabler) (*syslogCore, error) {
	w, err := syslog.New(syslog.LOG_DAEMON|syslog.LOG_INFO, "ckptfs")
	if err != nil {
		return nil, fmt.Errorf("no system log to write to (no /dev/log): %w", err)
	}
	enc := zapcore.EncoderConfig{
		MessageKey: "msg", NameKey: "logger", LineEnding: "",
		EncodeName: zapcore.FullNameEncoder, EncodeDuration: zapcore.StringDurationEncoder,
		ConsoleSeparator: " ",
	}
	return &syslogCore{LevelEnabler: level, enc: zapcore.NewConsoleEncoder(enc), w: w}, nil
}

// withLevel is the core writing to the same system log at level l.
func (c *syslogCore) withLevel(l zapcore.LevelEnabler) zapcore.Core {
	return &syslogCore{LevelEnabler: l, enc: c.enc.Clone(), w: c.w}
}

func (c *syslogCore) With(fields []zapcore.Field) zapcore.Core {
	enc := c.enc.Clone()
	for _, f := range fields {
		f.AddTo(enc)
	}
	return &syslogCore{LevelEnabler: c.LevelEnabler, enc: enc, w: c.w}
}

func (c *syslogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *syslogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	buf, err := c.enc.EncodeEntry(e, fields)
	if err != nil {
		return err
	}
	msg := buf.String()
	buf.Free()
	switch {
	case e.Level >= zapcore.DPanicLevel:
		return c.w.Crit(msg)
	case e.Level == zapcore.ErrorLevel:
		return c.w.Err(msg)
	case e.Level == zapcore.WarnLevel:
		return c.w.Warning(msg)
	case e.Level == zapcore.InfoLevel:
		return c.w.Info(msg)
	}
	return c.w.Debug(msg)
}

func (c *syslogCore) Sync() error { return nil }
