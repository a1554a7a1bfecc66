package s3

import (
	"fmt"
	"os"
	"strings"

	"github.com/aws/smithy-go/logging"
	"go.uber.org/zap"
)

// sdkLogger writes the AWS SDK's log lines (a warning that the instance
// metadata service fell back to IMDSv1, a response checksum not validated,
// ...) to the store's zap logger instead of the SDK's default, a bare
// "SDK <time> WARN ..." line on stderr.
type sdkLogger struct{ l *zap.Logger }

func (s sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if c == logging.Warn && !strings.HasPrefix(msg, imdsV1Fallback) {
		s.l.Warn(msg)
		return
	}
	s.l.Debug(msg)
}

// imdsV1Fallback begins the SDK's warning that the instance metadata
// service gave no IMDSv2 token. Without other credentials it is the first
// thing the credential chain says, before the failure that matters (no
// credentials, said with what to do); with an instance role the role works
// over IMDSv1. Either way there is nothing to do about it: debug.
const imdsV1Fallback = "falling back to IMDSv1"

// newSDKLogger is the SDK's logger writing to l; nil l discards the lines.
func newSDKLogger(l *zap.Logger) logging.Logger {
	if l == nil {
		return logging.Nop{}
	}
	return sdkLogger{l: l.Named("aws").WithOptions(zap.AddCallerSkip(1))}
}

// staticCredentials reports whether the credentials are static keys, given
// in c or in the environment where the SDK's chain takes them first (no
// profile is named): then nothing needs the EC2 instance metadata service.
func (c Config) staticCredentials() bool {
	if c.AccessKey != "" {
		return true
	}
	if c.Profile != "" {
		return false
	}
	return os.Getenv("AWS_ACCESS_KEY_ID") != "" && os.Getenv("AWS_SECRET_ACCESS_KEY") != ""
}
