package main

import (
	"fmt"
	"log/syslog"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/coreos/go-systemd/v22/journal"
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
	return &syslogCore{LevelEnabler: level, enc: zapcore.NewConsoleEncoder(syslogEncoderConfig()), w: w}, nil
}

// syslogEncoderConfig writes an entry as the system log and the journal
// show it: the message and fields, without the time, which they add.
func syslogEncoderConfig() zapcore.EncoderConfig {
	return zapcore.EncoderConfig{
		MessageKey: "msg", NameKey: "logger", LineEnding: "",
		EncodeName: zapcore.FullNameEncoder, EncodeDuration: zapcore.StringDurationEncoder,
		ConsoleSeparator: " ",
	}
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

// journalCore writes zap entries to journald with structured fields: each
// zap field as a journal field of its name in upper case (CKPTFS_ before
// it, "store" is CKPTFS_STORE), the message as the console encoder prints it,
// the priority of its level and the identifier ckptfs (journalctl -t ckptfs,
// as with the system log).
type journalCore struct {
	zapcore.LevelEnabler
	enc    zapcore.Encoder
	fields []zapcore.Field                                                    // from With
	send   func(msg string, p journal.Priority, vars map[string]string) error // journal.Send; tests replace it
}

// newJournalCore is a journalCore at level, or nil when journald does not
// run here.
func newJournalCore(level zapcore.LevelEnabler) *journalCore {
	if !journal.Enabled() {
		return nil
	}
	return &journalCore{LevelEnabler: level, enc: zapcore.NewConsoleEncoder(syslogEncoderConfig()), send: journal.Send}
}

func (c *journalCore) withLevel(l zapcore.LevelEnabler) zapcore.Core {
	return &journalCore{LevelEnabler: l, enc: c.enc.Clone(), fields: c.fields, send: c.send}
}

func (c *journalCore) With(fields []zapcore.Field) zapcore.Core {
	enc := c.enc.Clone()
	for _, f := range fields {
		f.AddTo(enc)
	}
	return &journalCore{LevelEnabler: c.LevelEnabler, enc: enc, fields: append(slices.Clip(c.fields), fields...), send: c.send}
}

func (c *journalCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *journalCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	buf, err := c.enc.EncodeEntry(e, fields)
	if err != nil {
		return err
	}
	msg := buf.String()
	buf.Free()
	m := zapcore.NewMapObjectEncoder()
	for _, f := range append(slices.Clip(c.fields), fields...) {
		f.AddTo(m)
	}
	vars := map[string]string{"SYSLOG_IDENTIFIER": "ckptfs"}
	if e.LoggerName != "" {
		vars["CKPTFS_LOGGER"] = e.LoggerName
	}
	for k, v := range m.Fields {
		vars[journalField(k)] = fmt.Sprint(v)
	}
	return c.send(msg, journalPriority(e.Level), vars)
}

func (c *journalCore) Sync() error { return nil }

// journalField is the journal's name of a zap field: upper-case letters,
// digits and underscores, after CKPTFS_.
func journalField(k string) string {
	b := []byte("CKPTFS_")
	for _, r := range strings.ToUpper(k) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b = append(b, byte(r))
		} else {
			b = append(b, '_')
		}
	}
	return string(b)
}

// journalPriority is the syslog priority of a zap level.
func journalPriority(l zapcore.Level) journal.Priority {
	switch {
	case l >= zapcore.DPanicLevel:
		return journal.PriCrit
	case l == zapcore.ErrorLevel:
		return journal.PriErr
	case l == zapcore.WarnLevel:
		return journal.PriWarning
	case l == zapcore.InfoLevel:
		return journal.PriInfo
	}
	return journal.PriDebug
}
